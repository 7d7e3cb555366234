package dev.cmf4j.model;

import dev.cmf4j.backend.Activation;
import dev.cmf4j.backend.Glu;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.offset;

/** Rope variants and activations against values computed from their definitions. */
class SpecPartsTest {

    @Test void llama3BandsKeepDivideAndSmooth() {
        Rope plain = Rope.standard(500000, 32);
        Rope r = Rope.llama3(500000, 32, 8, 1, 4, 64);
        double lowWave = 64 / 1.0, highWave = 64 / 4.0;
        boolean sawKept = false, sawDivided = false, sawSmoothed = false;
        for (int i = 0; i < 16; i++) {
            double f = plain.freq(i), wave = 2 * Math.PI / f;
            if (wave < highWave) { assertThat(r.freq(i)).isCloseTo((float) f, offset(1e-7f)); sawKept = true; }
            else if (wave > lowWave) { assertThat((double) r.freq(i)).isCloseTo(f / 8, offset(1e-9)); sawDivided = true; }
            else {
                double smooth = (64 / wave - 1) / (4 - 1);
                assertThat((double) r.freq(i)).isCloseTo((1 - smooth) * f / 8 + smooth * f, offset(1e-8));
                sawSmoothed = true;
            }
        }
        assertThat(sawKept && sawDivided && sawSmoothed).isTrue();
    }

    @Test void yarnRampsBetweenInterpolationAndExtrapolation() {
        Rope r = Rope.yarn(150000, 16, 32, 4096, 32, 1, null, null, null, false);
        assertThat(r.attentionScaling()).isCloseTo((float) (0.1 * Math.log(32) + 1), offset(1e-6f));
        Rope plain = Rope.standard(150000, 16);
        assertThat(r.freq(0)).isCloseTo(plain.freq(0), offset(1e-7f));          // fastest: extrapolated
        assertThat((double) r.freq(7)).isCloseTo(plain.freq(7) / 32.0, offset(1e-9));   // slowest: interpolated
    }

    @Test void proportionalRotatesAShareOfTheHead() {
        Rope r = Rope.proportional(1e6, 32, 0.25, 1);
        assertThat(r.rotaryDim()).isEqualTo(32);
        for (int i = 0; i < 4; i++) assertThat((double) r.freq(i)).isCloseTo(Math.pow(1e6, -2.0 * i / 32), offset(1e-7));
        for (int i = 4; i < 16; i++) assertThat(r.freq(i)).isZero();
    }

    @Test void activations() {
        assertThat(Activation.SILU.apply(1f)).isCloseTo((float) (1 / (1 + Math.exp(-1))), offset(1e-7f));
        double x = 0.7;
        double geluTanh = 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
        assertThat((double) Activation.GELU_TANH.apply(0.7f)).isCloseTo(geluTanh, offset(1e-7));
        assertThat((double) Activation.GELU.apply(0.7f)).isCloseTo(0.5306254, offset(1e-6));
        Glu.ClampedSwiglu c = new Glu.ClampedSwiglu(1.702f, 7f);
        // gate clamped to 7 from above only, up clamped to ±7
        double g = 7, want = g / (1 + Math.exp(-1.702 * g)) * (7 + 1);
        assertThat((double) c.apply(9f, 8f)).isCloseTo(want, offset(1e-5));
        double g2 = -9, want2 = g2 / (1 + Math.exp(-1.702 * g2)) * (-7 + 1);
        assertThat((double) c.apply(-9f, -8f)).isCloseTo(want2, offset(1e-5));
    }
}
