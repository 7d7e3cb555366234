package dev.cmf4j.backend.cuda;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The NCCL bindings ({@link Nccl}) against the mock library (mockcuda.c's ncclX functions, whose device memory is host
 * memory): the version, a clique of communicators, all-reduces of two ranks in a group (apart and in place) giving every
 * rank the sum, and the errors a misuse gets (a group missing a rank, two ranks outside a group, a device twice, a
 * library that is not there). The real library runs on a GPU machine (`cmf devices` names it).
 */
class NcclMockTest {
    @TempDir static Path tmp;
    static Nccl nccl;
    static Path lib;

    @BeforeAll static void open() throws Exception {
        lib = MockCuda.build(tmp);
        nccl = Nccl.load(List.of(lib.toString()));
    }

    static int allReduces() { return (int) MockCuda.read(lib, "mock_nccl_allreduces", ValueLayout.JAVA_INT); }

    @Test void versionAndLibrary() {
        assertThat(nccl.version()).isEqualTo("2.23.4");
        assertThat(nccl.library()).isEqualTo(lib.toString());
    }

    @Test void twoRanksAllReduceInAGroup() {
        MemorySegment[] comms = nccl.initAll(0, 1);
        assertThat(comms).hasSize(2);
        assertThat(nccl.count(comms[0])).isEqualTo(2);
        try (Arena a = Arena.ofConfined()) {
            int n = 1000;
            MemorySegment s0 = a.allocate(4L * n, 16), s1 = a.allocate(4L * n, 16), r0 = a.allocate(4L * n, 16), r1 = a.allocate(4L * n, 16);
            for (int i = 0; i < n; i++) {
                s0.setAtIndex(ValueLayout.JAVA_FLOAT, i, i * 0.5f);
                s1.setAtIndex(ValueLayout.JAVA_FLOAT, i, 3f - i);
            }
            int before = allReduces();
            nccl.groupStart();
            nccl.allReduceSum(s0.address(), r0.address(), n, comms[0], MemorySegment.NULL);
            nccl.allReduceSum(s1.address(), r1.address(), n, comms[1], MemorySegment.NULL);
            assertThat(r0.getAtIndex(ValueLayout.JAVA_FLOAT, 7)).as("nothing runs before the group ends").isZero();
            nccl.groupEnd();
            assertThat(allReduces() - before).isEqualTo(1);
            for (int i = 0; i < n; i++) {
                assertThat(r0.getAtIndex(ValueLayout.JAVA_FLOAT, i)).isEqualTo(i * 0.5f + (3f - i));
                assertThat(r1.getAtIndex(ValueLayout.JAVA_FLOAT, i)).isEqualTo(i * 0.5f + (3f - i));
            }
            // in place: each rank's buffer becomes the sum
            nccl.groupStart();
            nccl.allReduceSum(r0.address(), r0.address(), n, comms[0], MemorySegment.NULL);
            nccl.allReduceSum(s1.address(), s1.address(), n, comms[1], MemorySegment.NULL);
            nccl.groupEnd();
            assertThat(r0.getAtIndex(ValueLayout.JAVA_FLOAT, 10)).isEqualTo(10 * 0.5f + (3f - 10) + (3f - 10));
            assertThat(s1.getAtIndex(ValueLayout.JAVA_FLOAT, 10)).isEqualTo(r0.getAtIndex(ValueLayout.JAVA_FLOAT, 10));
        } finally {
            for (MemorySegment c : comms) nccl.destroy(c);
        }
    }

    @Test void misuseGetsNcclsOwnError() {
        MemorySegment[] comms = nccl.initAll(0, 1);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment b = a.allocate(64, 16);
            nccl.groupStart();
            nccl.allReduceSum(b.address(), b.address(), 16, comms[0], MemorySegment.NULL);
            assertThatThrownBy(nccl::groupEnd).isInstanceOf(CudaException.class)
                    .hasMessageContaining("ncclGroupEnd failed: ncclInvalidUsage (5)").hasMessageContaining("invalid usage");
            assertThatThrownBy(() -> nccl.allReduceSum(b.address(), b.address(), 16, comms[0], MemorySegment.NULL))
                    .as("two ranks outside a group").hasMessageContaining("ncclAllReduce failed: ncclInvalidUsage");
        } finally {
            for (MemorySegment c : comms) nccl.destroy(c);
        }
        assertThatThrownBy(() -> nccl.initAll(0, 0)).hasMessageContaining("ncclCommInitAll failed: ncclInvalidArgument (4)");
    }

    @Test void aMissingLibrarySaysWhatWasTried() {
        assertThatThrownBy(() -> Nccl.load(List.of("/nonexistent/libnccl.so.2")))
                .isInstanceOf(CudaUnavailableException.class)
                .hasMessageContaining("no NCCL: could not open libnccl.so.2 (tried /nonexistent/libnccl.so.2 (absent))")
                .hasMessageContaining("-Dcmf.nccl=PATH");
        assertThat(Nccl.candidates()).contains("libnccl.so.2");
    }
}
