package dev.cmf4j.backend.cpu.kernel;

import org.junit.jupiter.api.Test;

import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicInteger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class WorkerPoolTest {

    @Test
    void everyChunkRunsExactlyOnceAcrossManyJobs() throws Exception {
        try (WorkerPool pool = new WorkerPool(3, 1_000)) {    // short spin: exercise park/unpark too
            for (int job = 0; job < 300; job++) {
                int chunks = 1 + job % 37;
                AtomicIntegerArray hits = new AtomicIntegerArray(chunks);
                pool.run(chunks, (c, w) -> {
                    assertThat(w).isBetween(0, 2);
                    hits.incrementAndGet(c);
                });
                for (int c = 0; c < chunks; c++) assertThat(hits.get(c)).as("job %d chunk %d", job, c).isEqualTo(1);
                if (job % 50 == 0) Thread.sleep(3);             // let the workers park
            }
        }
    }

    @Test
    void failureInAChunkIsRethrownAfterTheJob() {
        try (WorkerPool pool = new WorkerPool(2)) {
            AtomicInteger ran = new AtomicInteger();
            assertThatThrownBy(() -> pool.run(10, (c, w) -> {
                ran.incrementAndGet();
                if (c == 4) throw new IllegalStateException("chunk 4 failed");
            })).isInstanceOf(IllegalStateException.class).hasMessage("chunk 4 failed");
            assertThat(ran.get()).isEqualTo(10);
            AtomicInteger after = new AtomicInteger();
            pool.run(5, (c, w) -> after.incrementAndGet());      // still usable
            assertThat(after.get()).isEqualTo(5);
        }
    }

    @Test
    void nestedRunExecutesInline() {
        try (WorkerPool pool = new WorkerPool(2)) {
            AtomicInteger inner = new AtomicInteger();
            pool.run(4, (c, w) -> pool.run(3, (c2, w2) -> inner.incrementAndGet()));
            assertThat(inner.get()).isEqualTo(12);
        }
    }

    @Test
    void rejectsBadSizesAndUseAfterClose() {
        assertThatThrownBy(() -> new WorkerPool(0)).isInstanceOf(IllegalArgumentException.class);
        WorkerPool pool = new WorkerPool(2);
        pool.close();
        assertThatThrownBy(() -> pool.run(3, (c, w) -> {})).isInstanceOf(IllegalStateException.class);
    }
}
