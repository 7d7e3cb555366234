package dev.cmf4j.backend.cuda;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Every kernel signature the resident forward packs launches by ({@link Kernels}) against the declaration in its
 * {@code .cu} file, with the kernel-defining macros expanded and the files' typedefs resolved: same name, same number
 * of parameters, each of the same kind.
 */
class KernelSignatureTest {

    @Test void everySignatureMatchesItsDeclaration() {
        Map<String, Map<String, List<KernelSignature.Param>>> declared = new HashMap<>();
        for (String file : Kernels.FILES)
            declared.put(file, declarations(KernelSource.resource(file).source()));
        Set<String> checked = new HashSet<>();
        for (KernelSignature k : Kernels.all()) {
            List<KernelSignature.Param> c = declared.get(k.file()).get(k.name());
            assertThat(c).as(k.file() + " declares " + k.name()).isNotNull();
            assertThat(k.params()).as(k.name()).isEqualTo(c);
            checked.add(k.name());
        }
        // every kernel of the five files has a signature: none is launched with an unchecked argument block
        for (var e : declared.entrySet()) assertThat(checked).as(e.getKey()).containsAll(e.getValue().keySet());
        assertThat(checked).hasSizeGreaterThan(40);
    }

    @Test void packingChecksEachArgumentAgainstItsParameter() {
        KernelSignature k = KernelSignature.of("x.cu", "k", "const float* x, long long n, int rows, float eps");
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ptrs = k.pack(a, 7L, 9L, 3, 0.5f).reinterpret(32);
            MemorySegment n = ptrs.getAtIndex(ValueLayout.ADDRESS, 1).reinterpret(8);
            MemorySegment eps = ptrs.getAtIndex(ValueLayout.ADDRESS, 3).reinterpret(4);
            assertThat(n.get(ValueLayout.JAVA_LONG, 0)).isEqualTo(9L);
            assertThat(eps.get(ValueLayout.JAVA_FLOAT, 0)).isEqualTo(0.5f);
            assertThatThrownBy(() -> k.pack(a, 7L, 9L, 3)).hasMessage("k: 3 arguments for 4 parameters");
            assertThatThrownBy(() -> k.pack(a, 7L, 9L, 3L, 0.5f)).hasMessage("k: argument 2 (3, a Long) for a INT parameter");
            assertThatThrownBy(() -> k.pack(a, 7L, 9L, 3, 0.5)).hasMessageContaining("argument 3 (0.5, a Double) for a FLOAT");
            assertThatThrownBy(() -> k.pack(a, 7, 9L, 3, 0.5f)).hasMessageContaining("argument 0 (7, a Integer) for a POINTER");
        }
        assertThatThrownBy(() -> KernelSignature.of("x.cu", "k", "double d")).hasMessageContaining("'double d'");
    }

    private static final Pattern DEFINE = Pattern.compile("^\\s*#define\\s+(\\w+)\\(([^)]*)\\)\\s*(.*)$");
    private static final Pattern CALL = Pattern.compile("^\\s*(\\w+)\\((.*)\\)\\s*;?\\s*$");
    private static final Pattern KERNEL = Pattern.compile(
            "extern\\s+\"C\"\\s+__global__\\s+void\\s+(?:__launch_bounds__\\s*\\([^)]*\\)\\s*)?(\\w+)\\s*\\(([^)]*)\\)");
    private static final Pattern TYPEDEF = Pattern.compile("typedef\\s+([^;]+?)\\s+(\\w+)\\s*;");

    /** Kernel name -> parameter kinds, from a .cu source with its kernel-defining macros expanded. */
    static Map<String, List<KernelSignature.Param>> declarations(String source) {
        String joined = source.replaceAll("\\\\\\n", " ");
        Map<String, String> typedefs = new HashMap<>();
        Matcher t = TYPEDEF.matcher(joined);
        while (t.find()) typedefs.put(t.group(2), t.group(1));
        Map<String, String[]> macros = new HashMap<>();
        StringBuilder expanded = new StringBuilder();
        for (String line : joined.split("\n")) {
            Matcher d = DEFINE.matcher(line);
            if (d.matches()) { macros.put(d.group(1), new String[] {d.group(2), d.group(3)}); continue; }
            Matcher c = CALL.matcher(line);
            if (c.matches() && macros.containsKey(c.group(1)) && macros.get(c.group(1))[1].contains("__global__")) {
                String[] m = macros.get(c.group(1));
                String[] ps = m[0].split(","), as = c.group(2).split(",");
                String body = m[1];
                for (int i = 0; i < ps.length; i++) {
                    String p = Pattern.quote(ps[i].strip()), a = Matcher.quoteReplacement(as[i].strip());
                    body = body.replaceAll("##\\s*" + p + "\\b", a).replaceAll("\\b" + p + "\\s*##", a).replaceAll("\\b" + p + "\\b", a);
                }
                expanded.append(body).append('\n');
            } else expanded.append(line).append('\n');
        }
        Map<String, List<KernelSignature.Param>> out = new HashMap<>();
        Matcher k = KERNEL.matcher(expanded);
        while (k.find()) {
            List<KernelSignature.Param> ps = new ArrayList<>();
            for (String p : k.group(2).split(",")) {
                String decl = p.strip().replaceAll("\\s+", " ");
                String type = decl.replaceAll("\\s+\\w+$", "").replace("const ", "").strip();
                ps.add(KernelSignature.param(typedefs.containsKey(type) ? typedefs.get(type) + " x" : decl));
            }
            out.put(k.group(1), ps);
        }
        return out;
    }
}
