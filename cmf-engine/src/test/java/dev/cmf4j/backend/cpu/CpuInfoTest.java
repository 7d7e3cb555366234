package dev.cmf4j.backend.cpu;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** {@link CpuInfo}: what it reads from {@code /proc/cpuinfo} texts of the kinds Linux writes, and this machine's. */
class CpuInfoTest {
    /** Two processors of an x86 host as Linux 6 prints them (flags cut short). */
    static final String X86 = """
            processor\t: 0
            vendor_id\t: AuthenticAMD
            cpu family\t: 25
            model\t\t: 17
            model name\t: AMD EPYC 9654 96-Core Processor
            stepping\t: 1
            flags\t\t: fpu sse2 avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni avx512vbmi
            bugs\t\t: sysret_ss_attrs

            processor\t: 1
            vendor_id\t: AuthenticAMD
            cpu family\t: 26
            model name\t: another name the first block's must win over
            flags\t\t: fpu amx_tile
            """;

    /** An ARM host: no model name, the implementer and part, "Features". */
    static final String ARM = """
            processor\t: 0
            BogoMIPS\t: 2000.00
            Features\t: fp asimd evtstrm aes crc32 atomics fphp asimdhp cpuid asimddp sve i8mm bf16
            CPU implementer\t: 0x41
            CPU architecture: 8
            CPU part\t: 0xd4f
            """;

    @Test
    void x86NameFamilyModelAndTheFlagsThatMatter() {
        CpuInfo c = CpuInfo.parse(X86, "amd64", 2, 512);
        assertThat(c.name()).isEqualTo("AMD EPYC 9654 96-Core Processor");
        assertThat(c.identity()).isEqualTo("family 25 model 17 stepping 1");
        assertThat(c.features()).containsExactly("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16");
        assertThat(c.describe()).isEqualTo("AMD EPYC 9654 96-Core Processor (family 25 model 17 stepping 1), 2 processors, "
                + "512-bit vectors, avx2 fma avx512f avx512bw avx512_vnni avx512_bf16");
    }

    @Test
    void armImplementerPartAndFeatures() {
        CpuInfo c = CpuInfo.parse(ARM, "aarch64", 1, 128);
        assertThat(c.name()).isEqualTo("aarch64");
        assertThat(c.identity()).isEqualTo("implementer 0x41 part 0xd4f");
        assertThat(c.features()).containsExactly("asimd", "asimddp", "i8mm", "bf16", "sve");
        assertThat(c.describe()).isEqualTo("aarch64 (implementer 0x41 part 0xd4f), 1 processor, 128-bit vectors, asimd asimddp i8mm bf16 sve");
    }

    @Test
    void noCpuinfoGivesTheArchitectureAlone() {
        CpuInfo c = CpuInfo.parse("", "amd64", 4, 256);
        assertThat(c.describe()).isEqualTo("amd64, 4 processors, 256-bit vectors");
        assertThat(CpuInfo.parse("garbage without colons\n\n\n", "x", 1, 64).describe()).isEqualTo("x, 1 processor, 64-bit vectors");
    }

    @Test
    void thisMachine() throws Exception {
        CpuInfo c = CpuInfo.host();
        assertThat(c.processors()).isEqualTo(Runtime.getRuntime().availableProcessors());
        assertThat(c.vectorBits()).isEqualTo(jdk.incubator.vector.FloatVector.SPECIES_PREFERRED.vectorBitSize());
        assertThat(c.name()).isNotBlank();
        Path p = Path.of("/proc/cpuinfo");
        if (Files.isReadable(p)) {
            String text = Files.readString(p);
            if (text.contains("model name")) assertThat(text).contains(c.name());
            for (String f : c.features()) assertThat(text).containsPattern("\\b" + f + "\\b");
        }
    }
}
