package dev.cmf4j.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * tools/read-probe/read_probe.c, the streaming-read ceiling decode is reported against: built with the C compiler and
 * run over a file of random bytes whose length is no multiple of a thread's slice, with 1 and 3 threads; the XOR of
 * the file's 64-bit words it prints must be the one computed here (every byte read once, none twice), and it must say
 * how fast it read.
 */
class ReadProbeTest {

    @Test void theProbeReadsEveryWordOfTheFileOnce(@TempDir Path tmp) throws Exception {
        Path src = null;
        for (Path p = Path.of("").toAbsolutePath(); p != null && src == null; p = p.getParent())
            if (Files.exists(p.resolve("tools/read-probe/read_probe.c"))) src = p.resolve("tools/read-probe/read_probe.c");
        assertThat(src).as("tools/read-probe/read_probe.c above " + Path.of("").toAbsolutePath()).isNotNull();
        Path exe = tmp.resolve("read_probe");
        Process cc;
        try {
            cc = new ProcessBuilder("cc", "-O2", "-pthread", src.toString(), "-o", exe.toString()).redirectErrorStream(true).start();
        } catch (java.io.IOException e) {
            assumeTrue(false, "no C compiler (cc) to build tools/read-probe");
            return;
        }
        String ccLog = new String(cc.getInputStream().readAllBytes());
        assertThat(cc.waitFor(120, TimeUnit.SECONDS) && cc.exitValue() == 0).as("cc: " + ccLog).isTrue();

        byte[] bytes = new byte[3 * 1024 * 1024 + 8 * 37 + 5];   // the 5 bytes past the last word are not in the XOR
        new SplittableRandom(11).nextBytes(bytes);
        Path file = tmp.resolve("model.bin");
        Files.write(file, bytes);
        ByteBuffer bb = ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
        long xor = 0;
        for (int i = 0; i + 8 <= bytes.length; i += 8) xor ^= bb.getLong(i);

        for (String threads : new String[] {"1", "3"}) {
            Process p = new ProcessBuilder(exe.toString(), file.toString(), threads, "2").redirectErrorStream(true).start();
            String out = new String(p.getInputStream().readAllBytes());
            assertThat(p.waitFor(60, TimeUnit.SECONDS)).isTrue();
            assertThat(p.exitValue()).as(out).isZero();
            var m = Pattern.compile("read_probe: (\\d+) bytes, (\\d+) threads, .* best ([0-9.]+) GB/s, median ([0-9.]+) GB/s over 2 passes; xor ([0-9a-f]{16})")
                    .matcher(out);
            assertThat(m.find()).as(out).isTrue();
            assertThat(Long.parseLong(m.group(1))).isEqualTo(bytes.length);
            assertThat(m.group(2)).isEqualTo(threads);
            assertThat(Double.parseDouble(m.group(3))).isPositive();
            assertThat(Long.parseUnsignedLong(m.group(5), 16)).as("XOR of the file's words, %s threads", threads).isEqualTo(xor);
        }

        Process bad = new ProcessBuilder(exe.toString(), tmp.resolve("missing.bin").toString()).redirectErrorStream(true).start();
        String badOut = new String(bad.getInputStream().readAllBytes());
        assertThat(bad.waitFor(60, TimeUnit.SECONDS)).isTrue();
        assertThat(bad.exitValue()).as(badOut).isNotZero();
        assertThat(badOut).contains("missing.bin");
    }
}
