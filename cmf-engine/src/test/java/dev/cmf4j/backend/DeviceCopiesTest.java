package dev.cmf4j.backend;

import dev.cmf4j.format.DType;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** The device copies' cache: one copy per tensor whatever the view, a copy from a closed mapping made again, frees counted. */
class DeviceCopiesTest {
    record Copy(MemorySegment source, int serial) implements DeviceCopies.Copy {}

    final List<Copy> freed = new ArrayList<>();
    final DeviceCopies<Copy> copies = new DeviceCopies<>(freed::add);
    int uploads;

    Copy upload(Matrix w) { return new Copy(w.data(), ++uploads); }

    @Test void viewsShareOneCopyAndAClosedMappingsCopyIsMadeAgain() {
        Arena first = Arena.ofConfined();
        MemorySegment data = first.allocate(4 * 6 * 8, 64);
        Matrix w = Matrix.of("w", DType.F32, data, 6, 8);
        Copy c = copies.get(w, this::upload);
        assertThat(copies.get(w.slice(2, 3, false), this::upload)).isSameAs(c);
        assertThat(uploads).isEqualTo(1);
        first.close();
        // a new mapping at the same address (a segment's equality is its address): the held copy is stale
        Matrix again = Matrix.of("w", DType.F32, MemorySegment.ofAddress(data.address()).reinterpret(data.byteSize()), 6, 8);
        Copy fresh = copies.get(again, this::upload);
        assertThat(fresh).isNotSameAs(c);
        assertThat(freed).containsExactly(c);
        assertThat(copies.get(again, this::upload)).isSameAs(fresh);
        assertThat(uploads).isEqualTo(2);
        copies.release(again);
        copies.release(again);
        assertThat(freed).containsExactly(c, fresh);
    }

    @Test void clearFreesEveryCopy() {
        try (Arena a = Arena.ofConfined()) {
            Matrix w1 = Matrix.of("a", DType.F32, a.allocate(16, 64), 2, 2), w2 = Matrix.of("b", DType.F32, a.allocate(16, 64), 2, 2);
            Copy c1 = copies.get(w1, this::upload), c2 = copies.get(w2, this::upload);
            copies.clear();
            assertThat(freed).containsExactlyInAnyOrder(c1, c2);
            assertThat(copies.get(w1, this::upload)).isNotSameAs(c1);
        }
    }
}
