package dev.cmf4j;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The rooms of this module never reach up (docs/ARCHITECTURE.md): {@code backend} knows only {@code format};
 * {@code model} knows {@code backend} and {@code format}; {@code runtime} knows the engine's rooms and {@code text}.
 * The three share one Maven module, so this reads every source's references to {@code dev.cmf4j.*} (imports, qualified
 * names and javadoc links alike) where the compiler would not.
 */
class RoomsTest {
    private static final Map<String, Set<String>> MAY_USE = Map.of(
            "backend", Set.of("backend", "format"),
            "model", Set.of("model", "backend", "format"),
            "runtime", Set.of("runtime", "model", "backend", "format", "text", "chat"));
    private static final Pattern REF = Pattern.compile("dev\\.cmf4j\\.([a-z]+)");

    @Test void noRoomReachesUp() throws IOException {
        Path root = Path.of("src/main/java/dev/cmf4j");
        assertThat(root).isDirectory();
        List<String> bad = new ArrayList<>();
        int files = 0;
        for (var room : MAY_USE.entrySet()) {
            try (Stream<Path> s = Files.walk(root.resolve(room.getKey()))) {
                for (Path f : s.filter(p -> p.toString().endsWith(".java")).toList()) {
                    files++;
                    Matcher m = REF.matcher(Files.readString(f));
                    while (m.find())
                        if (!room.getValue().contains(m.group(1))) bad.add(root.relativize(f) + " uses dev.cmf4j." + m.group(1));
                }
            }
        }
        assertThat(files).isGreaterThan(50);
        assertThat(bad).as("references from a room to one above it").isEmpty();
    }
}
