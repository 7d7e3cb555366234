package dev.cmf4j.testkit;

import dev.cmf4j.format.Npy;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;

/** Reads every array of a NumPy {@code .npz} archive (as written by {@code np.savez}). */
public final class Npz {
    private Npz() {}

    public static Map<String, Npy.Array> read(Path file) throws IOException {
        Map<String, Npy.Array> out = new LinkedHashMap<>();
        try (ZipFile zip = new ZipFile(file.toFile())) {
            Enumeration<? extends ZipEntry> en = zip.entries();
            while (en.hasMoreElements()) {
                ZipEntry e = en.nextElement();
                String name = e.getName();
                if (!name.endsWith(".npy")) continue;
                try (var in = zip.getInputStream(e)) {
                    out.put(name.substring(0, name.length() - 4), Npy.read(in));
                }
            }
        }
        return out;
    }
}
