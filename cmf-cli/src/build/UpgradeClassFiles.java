import java.io.IOException;
import java.lang.classfile.ClassFile;
import java.lang.classfile.ClassFileVersion;
import java.lang.classfile.ClassHierarchyResolver;
import java.lang.classfile.ClassModel;
import java.lang.classfile.ClassTransform;
import java.lang.classfile.CodeTransform;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.zip.ZipEntry;
import java.util.zip.ZipInputStream;
import java.util.zip.ZipOutputStream;

/**
 * Build step (cmf-cli's pom, after the shade): rewrites the class files of the shaded jar that are older than Java 6
 * (picocli ships as class-file version 49) as version 50 with stack maps, code otherwise unchanged. The JDK's AOT cache
 * skips pre-Java-6 classes, so a fresh {@code cmf} loaded, parsed and verified (with the old inferencing verifier)
 * picocli's ~170 classes from the jar on every start. Each rewritten class is checked with the JDK's verifier port
 * ({@link ClassFile#verify}); any error fails the build.
 *
 * <p>Usage: {@code java UpgradeClassFiles.java JAR} (rewritten in place).
 */
public class UpgradeClassFiles {
    public static void main(String[] args) throws IOException {
        Path jar = Path.of(args[0]), tmp = jar.resolveSibling(jar.getFileName() + ".upgrading");
        ClassHierarchyResolver fromJar = ClassHierarchyResolver.ofResourceParsing(new URLClassLoader(new URL[] {jar.toUri().toURL()}, null));
        ClassFile cf = ClassFile.of(ClassFile.ClassHierarchyResolverOption.of(ClassHierarchyResolver.defaultResolver().orElse(fromJar)));
        ClassTransform toV50 = ClassTransform.transformingMethodBodies(CodeTransform.ACCEPT_ALL)   // rebuilt code: stack maps
                .andThen((cb, e) -> { if (e instanceof ClassFileVersion) cb.withVersion(ClassFile.JAVA_6_VERSION, 0); else cb.with(e); });
        int upgraded = 0;
        try (ZipInputStream in = new ZipInputStream(Files.newInputStream(jar)); ZipOutputStream out = new ZipOutputStream(Files.newOutputStream(tmp))) {
            for (ZipEntry e; (e = in.getNextEntry()) != null; ) {
                byte[] b = in.readAllBytes();
                if (e.getName().endsWith(".class") && !e.getName().contains("META-INF/")) {
                    ClassModel cm = cf.parse(b);
                    if (cm.majorVersion() < ClassFile.JAVA_6_VERSION) {
                        b = cf.transformClass(cm, toV50);
                        List<VerifyError> errors = cf.verify(b);
                        if (!errors.isEmpty()) throw new IllegalStateException(e.getName() + " does not verify after the rewrite: " + errors);
                        upgraded++;
                    }
                }
                ZipEntry o = new ZipEntry(e.getName());
                o.setTime(e.getTime());
                out.putNextEntry(o);
                out.write(b);
                out.closeEntry();
            }
        }
        Files.move(tmp, jar, StandardCopyOption.REPLACE_EXISTING);
        System.out.println("UpgradeClassFiles: " + upgraded + " class files of " + jar.getFileName() + " rewritten as version 50");
    }
}
