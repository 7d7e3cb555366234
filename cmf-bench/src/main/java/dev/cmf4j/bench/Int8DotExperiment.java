package dev.cmf4j.bench;

import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.concurrent.TimeUnit;

/**
 * The choice the q8 kernels made: int8 weights · float activations (widen each weight to float, FMA)
 * against int8 weights · int8 activations (activations quantized per 32-block like ggml's Q8_0
 * dots, int16 products, int32 sums, one float FMA per block). One thread, a 256 KiB matrix that
 * sits in L2, so the arithmetic rather than DRAM decides. Numbers in docs/CPU_KERNELS.md.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 4, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(value = 1, jvmArgsAppend = {"--add-modules", "jdk.incubator.vector"})
public class Int8DotExperiment {
    static final int ROWS = 256, COLS = 1024;
    static final VectorSpecies<Float> F = FloatVector.SPECIES_PREFERRED;
    static final int L = F.length();
    static final VectorSpecies<Byte> BL = VectorSpecies.of(byte.class, VectorShape.forBitSize(L * 8));
    static final VectorSpecies<Byte> B16 = ByteVector.SPECIES_128;
    static final VectorSpecies<Short> S16 = ShortVector.SPECIES_256;
    static final VectorSpecies<Integer> I8 = IntVector.SPECIES_256;
    static final VectorSpecies<Float> F8 = FloatVector.SPECIES_256;
    static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;

    MemorySegment w;
    float[] x, y;
    byte[] xq;
    float[] xs;

    @Setup(Level.Trial)
    public void setup() {
        w = Arena.ofAuto().allocate((long) ROWS * COLS, 64);
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(1);
        for (long i = 0; i < w.byteSize(); i++) w.set(ValueLayout.JAVA_BYTE, i, (byte) (rnd.nextInt(255) - 127));
        x = BenchWeights.gaussian(3, COLS, 1f);
        y = new float[ROWS];
        xq = new byte[COLS];
        xs = new float[COLS / 32];
    }

    /** The first q8 kernel: L int8 weights sign-extended and converted to a float vector per FMA. */
    @Benchmark
    public float floatActivations() {
        for (int r = 0; r < ROWS; r++) {
            long base = (long) r * COLS;
            FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < COLS; c += 4 * L) {
                long o = base + c;
                a0 = ((FloatVector) ByteVector.fromMemorySegment(BL, w, o, LE).convertShape(VectorOperators.B2F, F, 0)).fma(FloatVector.fromArray(F, x, c), a0);
                a1 = ((FloatVector) ByteVector.fromMemorySegment(BL, w, o + L, LE).convertShape(VectorOperators.B2F, F, 0)).fma(FloatVector.fromArray(F, x, c + L), a1);
                a2 = ((FloatVector) ByteVector.fromMemorySegment(BL, w, o + 2 * L, LE).convertShape(VectorOperators.B2F, F, 0)).fma(FloatVector.fromArray(F, x, c + 2 * L), a2);
                a3 = ((FloatVector) ByteVector.fromMemorySegment(BL, w, o + 3 * L, LE).convertShape(VectorOperators.B2F, F, 0)).fma(FloatVector.fromArray(F, x, c + 3 * L), a3);
            }
            y[r] = a0.add(a1).add(a2.add(a3)).reduceLanes(VectorOperators.ADD);
        }
        return y[0];
    }

    static final VectorSpecies<Integer> IL = IntVector.SPECIES_PREFERRED;

    /**
     * What the q8 kernels do now (Q8Matrix.dotRows): weights as int lanes in offset binary, byte k
     * by AND (exact as q·256^k), activation pre-scaled by 256^−k — float activations, no
     * byte→int widening shuffle. (The activation layout is not prepared here: speed only.)
     */
    @Benchmark
    public float floatActivationsIntLanes() {
        IntVector flip = IntVector.broadcast(IL, 0x80808080), b0 = IntVector.broadcast(IL, 0xFF),
                b1 = IntVector.broadcast(IL, 0xFF00), b2 = IntVector.broadcast(IL, 0xFF0000);
        int block = 4 * L;
        for (int r = 0; r < ROWS; r++) {
            long base = (long) r * COLS;
            FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < COLS; c += block) {
                IntVector v = IntVector.fromMemorySegment(IL, w, base + c, LE).lanewise(VectorOperators.XOR, flip);
                a0 = ((FloatVector) v.and(b0).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, x, c), a0);
                a1 = ((FloatVector) v.and(b1).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, x, c + L), a1);
                a2 = ((FloatVector) v.and(b2).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, x, c + 2 * L), a2);
                a3 = ((FloatVector) v.lanewise(VectorOperators.LSHR, 24).convert(VectorOperators.I2F, 0)).fma(FloatVector.fromArray(F, x, c + 3 * L), a3);
            }
            y[r] = a0.add(a1).add(a2.add(a3)).reduceLanes(VectorOperators.ADD);
        }
        return y[0];
    }

    /** Per call: x → int8 per 32-block (absmax/127), as the int paths need. */
    private void quantizeX() {
        for (int b = 0; b < COLS / 32; b++) {
            float a = 0;
            for (int j = 0; j < 32; j++) a = Math.max(a, Math.abs(x[b * 32 + j]));
            float s = a / 127f, inv = a == 0 ? 0 : 127f / a;
            xs[b] = s;
            for (int j = 0; j < 32; j++) xq[b * 32 + j] = (byte) Math.round(x[b * 32 + j] * inv);
        }
    }

    /**
     * Lane-count-preserving widenings only (16 bytes -> 16 shorts), which C2 intrinsifies; the
     * "part 1" form of a 32-byte -> 16-short widening falls back to Java code (measured ~1000x slower).
     */
    @Benchmark
    public float int8ActivationsPairShifts() {
        quantizeX();
        for (int r = 0; r < ROWS; r++) {
            long base = (long) r * COLS;
            FloatVector acc = FloatVector.zero(F8);
            for (int b = 0; b < COLS / 32; b++) {
                long o = base + b * 32;
                ShortVector w0 = (ShortVector) ByteVector.fromMemorySegment(B16, w, o, LE).convertShape(VectorOperators.B2S, S16, 0);
                ShortVector w1 = (ShortVector) ByteVector.fromMemorySegment(B16, w, o + 16, LE).convertShape(VectorOperators.B2S, S16, 0);
                ShortVector x0 = (ShortVector) ByteVector.fromArray(B16, xq, b * 32).convertShape(VectorOperators.B2S, S16, 0);
                ShortVector x1 = (ShortVector) ByteVector.fromArray(B16, xq, b * 32 + 16).convertShape(VectorOperators.B2S, S16, 0);
                ShortVector p = w0.mul(x0).add(w1.mul(x1));           // |.| <= 2*127*127 fits int16
                IntVector pi = p.reinterpretAsInts();                   // pmaddwd by hand: low + high int16 of each lane
                IntVector s = pi.lanewise(VectorOperators.LSHL, 16).lanewise(VectorOperators.ASHR, 16).add(pi.lanewise(VectorOperators.ASHR, 16));
                acc = ((FloatVector) s.convert(VectorOperators.I2F, 0)).fma(FloatVector.broadcast(F8, xs[b]), acc);
            }
            y[r] = acc.reduceLanes(VectorOperators.ADD);
        }
        return y[0];
    }

    /** As above but int32 sums over 4 blocks before one conversion (activation scale per 128). */
    @Benchmark
    public float int8ActivationsPairShifts128() {
        quantizeX();
        for (int r = 0; r < ROWS; r++) {
            long base = (long) r * COLS;
            FloatVector acc = FloatVector.zero(F8);
            for (int b = 0; b < COLS / 32; b += 4) {
                IntVector s = IntVector.zero(I8);
                for (int k = 0; k < 4; k++) {
                    long o = base + (b + k) * 32;
                    ShortVector w0 = (ShortVector) ByteVector.fromMemorySegment(B16, w, o, LE).convertShape(VectorOperators.B2S, S16, 0);
                    ShortVector w1 = (ShortVector) ByteVector.fromMemorySegment(B16, w, o + 16, LE).convertShape(VectorOperators.B2S, S16, 0);
                    ShortVector x0 = (ShortVector) ByteVector.fromArray(B16, xq, (b + k) * 32).convertShape(VectorOperators.B2S, S16, 0);
                    ShortVector x1 = (ShortVector) ByteVector.fromArray(B16, xq, (b + k) * 32 + 16).convertShape(VectorOperators.B2S, S16, 0);
                    IntVector pi = w0.mul(x0).add(w1.mul(x1)).reinterpretAsInts();
                    s = s.add(pi.lanewise(VectorOperators.LSHL, 16).lanewise(VectorOperators.ASHR, 16)).add(pi.lanewise(VectorOperators.ASHR, 16));
                }
                acc = ((FloatVector) s.convert(VectorOperators.I2F, 0)).fma(FloatVector.broadcast(F8, xs[b]), acc);
            }
            y[r] = acc.reduceLanes(VectorOperators.ADD);
        }
        return y[0];
    }
}
