package dev.cmf4j.text;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The hand-written word splitters give exactly the matches of the general regex path (the
 * translated Oniguruma pattern run by java.util.regex) on random text drawn from every character
 * class the patterns distinguish: a bounded fuzz, fixed seed.
 */
class WordSplitterTest {
    private static final String[] POOL = {
        "a", "Z", "é", "ß", "ſ", "K", "中", "ひ", "한", "ا", "ש", "अ", "ि", "्", "ก", "\u0301", "Ⅻ", "½", "٣", "7", "0", "²",
        "'", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D",
        " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u000B", "\u000C", "\u0085", "\u00A0", "\u2009", "\u3000", "\u2028", "\u200B", "\uFEFF", "\u001C",
        "!", ".", ",", "-", "_", "$", "+", "<", "|", "€", "…", "“", "\u0000", "\u007F",
        "😀", "👍🏽", "\u200D", "🇺🇸", "𝐇", "𝟘", "\uD800", "\uDC00",
    };

    private static String randomText(SplittableRandom r) {
        StringBuilder sb = new StringBuilder();
        int n = r.nextInt(24);
        for (int i = 0; i < n; i++) sb.append(POOL[r.nextInt(POOL.length)]);
        return sb.toString();
    }

    private static List<Integer> spans(Matches m) {
        List<Integer> out = new ArrayList<>();
        for (int i = 0; i < m.size(); i++) {
            out.add(m.start(i));
            out.add(m.end(i));
            out.add(m.isMatch(i) ? 1 : 0);
        }
        return out;
    }

    @ParameterizedTest
    @ValueSource(strings = {WordSplitter.LLAMA3, WordSplitter.QWEN, WordSplitter.GPT2})
    void fastSplitterEqualsTheRegex(String pattern) {
        WordSplitter fast = WordSplitter.forPattern(pattern);
        OnigRegex regex = OnigRegex.compile(pattern);
        assertThat(fast).isNotNull();
        SplittableRandom r = new SplittableRandom(42);
        Matches a = new Matches(), b = new Matches();
        for (int i = 0; i < 10_000; i++) {
            String s = randomText(r);
            fast.find(s, a);
            regex.find(s, b);
            assertThat(spans(a)).as("splitting %s", s.codePoints().mapToObj(c -> String.format("U+%04X", c)).toList()).isEqualTo(spans(b));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"'s|'t", "\\p{L}+", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|\\p{N}{1,2}|\\s+"})
    void otherPatternsHaveNoFastPath(String pattern) {
        assertThat(WordSplitter.forPattern(pattern)).isNull();
    }
}
