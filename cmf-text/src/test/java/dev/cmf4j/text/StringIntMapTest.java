package dev.cmf4j.text;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** The vocabulary map against a LinkedHashMap: lookups (whole, ranges, concatenations) and forEach from the arena. */
class StringIntMapTest {
    @Test void matchesALinkedHashMapThroughGrowthAndOverwrites() {
        StringIntMap m = new StringIntMap(2);   // grows: slots rehash, the arena and the entry arrays copy
        Map<String, Integer> want = new LinkedHashMap<>();
        java.util.Random r = new java.util.Random(3);
        for (int i = 0; i < 5000; i++) {
            String k = i % 7 == 0 ? "x".repeat(r.nextInt(3000)) + i : Integer.toString(r.nextInt(2000), 36) + "é";
            m.put(k, i);
            want.put(k, i);   // a later put of the same key wins, keeping its first position
        }
        assertThat(m.size()).isEqualTo(want.size());
        List<String> keys = new ArrayList<>();
        m.forEach((k, v) -> {
            keys.add(k);
            assertThat(v).as(k).isEqualTo(want.get(k));
        });
        assertThat(keys).containsExactlyElementsOf(want.keySet());
        for (var e : want.entrySet()) {
            String k = e.getKey();
            assertThat(m.get(k)).isEqualTo(e.getValue());
            String padded = "<" + k + ">";
            assertThat(m.get(padded, 1, padded.length() - 1, k.hashCode())).isEqualTo(e.getValue());
            int cut = k.length() / 2;
            assertThat(m.getConcat(k, 0, cut, padded, 1 + cut, padded.length() - 1, k.hashCode())).isEqualTo(e.getValue());
        }
        assertThat(m.get("absent")).isEqualTo(-1);
    }
}
