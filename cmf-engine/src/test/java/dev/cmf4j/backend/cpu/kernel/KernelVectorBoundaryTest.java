package dev.cmf4j.backend.cpu.kernel;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.classfile.ClassFile;
import java.lang.classfile.ClassModel;
import java.lang.classfile.MethodModel;
import java.lang.constant.ClassDesc;
import java.lang.constant.MethodTypeDesc;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * No kernel method (here and in {@code backend.cpu}) takes or returns a Vector API value. C2 stops inlining a method's own helpers once its parse has
 * made ~18,000 nodes (NodeCountInliningCutoff, not settable in a product JVM), and the Vector API's operations make
 * hundreds each, so a decode loop sits near that line; whether a given compile passes it depends on the profile it was
 * made from. A helper left out boxes every vector passed to it or returned by it, on every iteration: the run decodes at
 * a third of its speed for its whole life, with the same results (f16 and q8 runs did, in 1 of 5 to 10 fresh JVMs).
 * The JDK's own operations are exempt (force-inlined past the cutoff); ours are not, so kernels write the steps out
 * or pass arrays (docs/CPU_KERNELS.md, "C2's node budget"). The exemption below is measured, not a convenience.
 */
class KernelVectorBoundaryTest {
    private static final String VECTOR_PACKAGE = "jdk.incubator.vector";
    /** q8's int-to-float helper: its calls are parsed before the budget ends, and written out the loop was slower (its javadoc). */
    private static final Set<String> EXEMPT = Set.of("dev/cmf4j/backend/cpu/kernel/Q8Matrix.cvt");

    @Test
    void noKernelMethodPassesAVector() throws Exception {
        List<String> found = new ArrayList<>();
        List<Path> classes = kernelClasses();
        assertThat(classes).as("the kernel packages' class files").hasSizeGreaterThan(20)
                .anyMatch(p -> p.getFileName().toString().equals("AttentionKernel.class"));
        for (Path file : classes) {
            ClassModel cm = ClassFile.of().parse(Files.readAllBytes(file));
            for (MethodModel mm : cm.methods()) {
                MethodTypeDesc type = mm.methodTypeSymbol();
                boolean vector = isVector(type.returnType()) || type.parameterList().stream().anyMatch(KernelVectorBoundaryTest::isVector);
                String name = cm.thisClass().asInternalName() + "." + mm.methodName().stringValue();
                if (vector && !EXEMPT.contains(name)) found.add(name + type.displayDescriptor());
            }
        }
        assertThat(found).as("kernel methods with a vector parameter or result").isEmpty();
    }

    @Test
    void theCheckSeesAVectorInASignature() {
        MethodTypeDesc helper = MethodTypeDesc.of(ClassDesc.of("jdk.incubator.vector.FloatVector"),
                ClassDesc.of("jdk.incubator.vector.IntVector"));
        assertThat(isVector(helper.returnType())).isTrue();
        assertThat(isVector(helper.parameterList().get(0))).isTrue();
        assertThat(isVector(ClassDesc.of("java.lang.foreign.MemorySegment"))).isFalse();
        assertThat(isVector(ClassDesc.of("jdk.incubator.vector.FloatVector").arrayType())).isFalse();
    }

    private static boolean isVector(ClassDesc d) {
        return d.isClassOrInterface() && d.packageName().equals(VECTOR_PACKAGE);
    }

    /**
     * The compiled classes of this package and of {@code backend.cpu} (the attention kernel, the engine's vector math):
     * main, not test, whose classes sit in another directory.
     */
    private static List<Path> kernelClasses() throws URISyntaxException, IOException {
        Path root = Path.of(WeightMatrix.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        Path kernel = root.resolve(WeightMatrix.class.getPackageName().replace('.', '/'));
        List<Path> out = new ArrayList<>();
        for (Path dir : List.of(kernel, kernel.getParent()))
            try (Stream<Path> s = Files.list(dir)) {
                s.filter(p -> p.toString().endsWith(".class")).sorted().forEach(out::add);
            }
        return out;
    }
}
