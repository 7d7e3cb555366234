package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Iterator;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.data.Offset.offset;

class HfArchTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    static ObjectNode arch(String model) {
        return HfArch.fromConfig(HfConfig.read(Fixtures.require("models/" + model).resolve("config.json")));
    }

    /** The per-layer values transformers resolved (golden.json "layers") match the arch block. */
    @ParameterizedTest
    @ValueSource(strings = {"llama", "qwen3", "gemma3", "gemma4", "gemma4_moe", "qwen3_next", "gpt_oss", "qwen3_moe", "qwen3_e2e"})
    void perLayerValuesMatchTransformers(String model) throws IOException {
        ObjectNode a = arch(model);
        JsonNode golden = JSON.readTree(Fixtures.require("models/" + model).resolve("golden.json").toFile());
        JsonNode layers = golden.get("layers");
        assertThat(a.get("num_layers").asInt()).isEqualTo(layers.size());
        int heads = a.get("num_attention_heads").asInt();
        for (JsonNode l : layers) {
            int i = l.get("layer").asInt();
            String type = a.get("layer_types").get(i).asText();
            if (l.get("mixer").asText().equals("linear_attn")) {
                assertThat(type).isEqualTo("LinearAttention");
                continue;
            }
            assertThat(a.get("layer_head_dims").get(i).asInt()).as("%s layer %d head_dim", model, i).isEqualTo(l.get("head_dim").asInt());
            assertThat(a.get("layer_attention_scales").get(i).asDouble()).as("%s layer %d scaling", model, i)
                    .isCloseTo(l.get("scaling").asDouble(), offset(1e-12));
            assertThat(heads / a.get("layer_kv_heads").get(i).asInt()).as("%s layer %d kv groups", model, i)
                    .isEqualTo(l.get("num_key_value_groups").asInt());
            if (l.has("sliding_window")) {
                boolean sliding = !l.get("sliding_window").isNull();
                assertThat(type).as("%s layer %d type", model, i).isEqualTo(sliding ? "SlidingAttention" : "FullAttention");
                if (sliding) assertThat(a.get("sliding_window").asInt()).isEqualTo(l.get("sliding_window").asInt());
            }
            if (l.has("is_kv_shared_layer")) {
                assertThat(a.get("layer_kv_sources").get(i).asInt() >= 0).as("%s layer %d shared", model, i)
                        .isEqualTo(l.get("is_kv_shared_layer").asBoolean());
            }
        }
    }

    /** Every field the reference converter wrote (refconv headers) has the same value in ours. */
    @ParameterizedTest
    @ValueSource(strings = {"llama-Q8_2F", "qwen3-F32", "qwen3_moe-Q8_2F", "qwen3_next-F32"})
    void referenceFieldsAgree(String file) throws IOException {
        ObjectNode ref = (ObjectNode) readCmfHeader(Fixtures.require("cmf/refconv/" + file + ".cmf")).get("arch");
        ObjectNode ours = arch(file.substring(0, file.indexOf('-')));
        for (Iterator<Map.Entry<String, JsonNode>> it = ref.fields(); it.hasNext(); ) {
            var e = it.next();
            if (e.getValue().isNull()) continue;       // the reference leaves e.g. qwen3_moe's moe null; we fill it
            JsonNode mine = ours.get(e.getKey());
            assertThat(mine).as("%s: field %s", file, e.getKey()).isNotNull();
            if (e.getValue().isObject()) {
                for (Iterator<Map.Entry<String, JsonNode>> s = e.getValue().fields(); s.hasNext(); ) {
                    var se = s.next();
                    assertThat(mine.get(se.getKey())).as("%s: %s.%s", file, e.getKey(), se.getKey()).isEqualTo(se.getValue());
                }
            } else if (e.getValue().isNumber()) {
                assertThat(mine.asDouble()).as("%s: field %s", file, e.getKey()).isEqualTo(e.getValue().asDouble());
            } else {
                assertThat(mine).as("%s: field %s", file, e.getKey()).isEqualTo(e.getValue());
            }
        }
    }

    @Test void llamaRopeScaling() {
        ObjectNode a = arch("llama");
        JsonNode r = a.get("rope").get("FullAttention");
        assertThat(r.get("rope_type").asText()).isEqualTo("llama3");
        assertThat(r.get("factor").asDouble()).isEqualTo(8.0);
        assertThat(r.get("low_freq_factor").asDouble()).isEqualTo(1.0);
        assertThat(r.get("high_freq_factor").asDouble()).isEqualTo(4.0);
        assertThat(r.get("original_max_position_embeddings").asInt()).isEqualTo(64);
        assertThat(a.get("tie_word_embeddings").asBoolean()).isFalse();
        assertThat(a.get("layer_ffn_kinds").toString()).isEqualTo("[\"dense\",\"dense\"]");
    }

    @Test void gemma3() {
        ObjectNode a = arch("gemma3");
        assertThat(a.get("norm_style").asText()).isEqualTo("gemma");
        assertThat(a.get("hidden_act").asText()).isEqualTo("gelu_tanh");
        assertThat(a.get("query_pre_attn_scalar").asDouble()).isEqualTo(24.0);
        assertThat(a.get("embed_multiplier").asDouble()).isEqualTo(8.0);
        assertThat(a.get("rope_theta").asDouble()).isEqualTo(1e6);
        assertThat(a.get("rope_local_base_freq").asDouble()).isEqualTo(1e4);
        assertThat(a.get("rope").get("FullAttention").get("rope_type").asText()).isEqualTo("linear");
        assertThat(a.get("rope").get("FullAttention").get("factor").asDouble()).isEqualTo(8.0);
        assertThat(a.get("rope").get("SlidingAttention").get("rope_type").asText()).isEqualTo("default");
        assertThat(a.get("sliding_window_pattern").asInt()).isEqualTo(6);
        assertThat(a.get("tie_word_embeddings").asBoolean()).isTrue();
    }

    @Test void gemma4DenseWithPleAndKvSharing() {
        ObjectNode a = arch("gemma4");
        assertThat(a.get("norm_style").asText()).isEqualTo("qwen");
        assertThat(a.get("global_head_dim").asInt()).isEqualTo(32);
        assertThat(a.get("layer_head_dims").toString()).isEqualTo("[16,16,32,16,32]");
        assertThat(a.get("layer_kv_sources").toString()).isEqualTo("[-1,-1,-1,1,2]");
        assertThat(a.get("attn_v_norm").asBoolean()).isTrue();
        assertThat(a.get("attention_k_eq_v").asBoolean()).isFalse();
        assertThat(a.get("final_logit_softcapping").asDouble()).isEqualTo(5.0);
        assertThat(a.get("g3n").get("ple_dim").asInt()).isEqualTo(16);
        assertThat(a.get("g3n").get("ple_vocab").asInt()).isEqualTo(1024);
        assertThat(a.get("g3n").get("num_kv_shared_layers").asInt()).isEqualTo(2);
        assertThat(a.get("use_double_wide_mlp").asBoolean()).isTrue();
        JsonNode full = a.get("rope").get("FullAttention");
        assertThat(full.get("rope_type").asText()).isEqualTo("proportional");
        assertThat(full.get("partial_rotary_factor").asDouble()).isEqualTo(0.25);
        assertThat(a.has("moe")).isFalse();
    }

    @Test void gemma4MoeAndGlobalHeadDimStyle() throws IOException {
        ObjectNode a = arch("gemma4_moe");
        assertThat(a.get("layer_kv_heads").toString()).isEqualTo("[2,1,2,1]");
        assertThat(a.get("attention_k_eq_v").asBoolean()).isTrue();
        assertThat(a.get("moe").get("num_experts").asInt()).isEqualTo(4);
        assertThat(a.get("moe").get("top_k").asInt()).isEqualTo(2);
        assertThat(a.get("moe").get("router").asText()).isEqualTo("gemma4");
        assertThat(a.get("layer_ffn_kinds").toString()).isEqualTo("[\"dense+moe\",\"dense+moe\",\"dense+moe\",\"dense+moe\"]");
        assertThat(a.has("g3n")).isFalse();

        // The Hub style: global_head_dim / num_global_key_value_heads instead of per_layer_config.
        ObjectNode cfg = (ObjectNode) JSON.readTree(Fixtures.require("models/gemma4_moe/config.json").toFile());
        cfg.remove("per_layer_config");
        cfg.put("global_head_dim", 32).put("num_global_key_value_heads", 1);
        ObjectNode hub = HfArch.fromConfig(HfConfig.of(cfg, "config.json"));
        assertThat(hub.get("layer_head_dims")).isEqualTo(a.get("layer_head_dims"));
        assertThat(hub.get("layer_kv_heads")).isEqualTo(a.get("layer_kv_heads"));
        // Nested under text_config (Gemma4ForConditionalGeneration) gives the same block.
        ObjectNode wrapped = JSON.createObjectNode();
        wrapped.put("model_type", "gemma4");
        wrapped.set("text_config", cfg);
        ObjectNode nested = HfArch.fromConfig(HfConfig.of(wrapped, "config.json"));
        assertThat(nested.get("layer_head_dims")).isEqualTo(a.get("layer_head_dims"));
    }

    @Test void gptOss() {
        ObjectNode a = arch("gpt_oss");
        assertThat(a.get("attention_sinks").asBoolean()).isTrue();
        JsonNode y = a.get("yarn");
        assertThat(y.get("factor").asDouble()).isEqualTo(32.0);
        assertThat(y.get("original_max_position_embeddings").asInt()).isEqualTo(4096);
        assertThat(y.get("beta_fast").asDouble()).isEqualTo(32.0);
        assertThat(y.get("beta_slow").asDouble()).isEqualTo(1.0);
        assertThat(y.get("attention_factor").asDouble()).isCloseTo(0.1 * Math.log(32) + 1, offset(1e-15));
        assertThat(y.get("truncate").asBoolean()).isFalse();
        JsonNode m = a.get("moe");
        assertThat(m.get("router").asText()).isEqualTo("topk_softmax");
        assertThat(m.get("swiglu_limit").asDouble()).isEqualTo(7.0);
        assertThat(m.get("swiglu_alpha").asDouble()).isEqualTo(1.702);
        assertThat(m.get("num_experts").asInt()).isEqualTo(8);
        assertThat(a.get("rope").get("SlidingAttention")).isEqualTo(a.get("rope").get("FullAttention"));
    }

    @Test void qwen3Next() {
        ObjectNode a = arch("qwen3_next");
        assertThat(a.get("attn_output_gate").asBoolean()).isTrue();
        assertThat(a.get("linear_norm_style").asText()).isEqualTo("qwen");
        assertThat(a.get("moe").get("shared_expert_gate").asText()).isEqualTo("sigmoid");
        assertThat(a.get("layer_ffn_kinds").toString()).isEqualTo("[\"moe\",\"moe\",\"moe\",\"moe\"]");
        assertThat(a.get("layer_head_dims").toString()).isEqualTo("[null,null,null,32]");
    }

    @Test void qwen3Moe() {
        ObjectNode a = arch("qwen3_moe");
        JsonNode m = a.get("moe");
        assertThat(m.get("num_experts").asInt()).isEqualTo(8);
        assertThat(m.get("top_k").asInt()).isEqualTo(2);
        assertThat(m.get("moe_intermediate_size").asInt()).isEqualTo(32);
        assertThat(m.get("norm_topk_prob").asBoolean()).isTrue();
        assertThat(m.get("router").asText()).isEqualTo("softmax_topk");
        assertThat(a.get("layer_ffn_kinds").toString()).isEqualTo("[\"moe\",\"moe\"]");
    }

    @Test void qwen3MoeSparseStepAndMlpOnlyLayers() throws IOException {
        ObjectNode cfg = (ObjectNode) JSON.readTree(Fixtures.require("models/qwen3_moe/config.json").toFile());
        cfg.put("num_hidden_layers", 4).put("decoder_sparse_step", 2);
        cfg.putArray("mlp_only_layers").add(3);
        ObjectNode a = HfArch.fromConfig(HfConfig.of(cfg, "config.json"));
        assertThat(a.get("layer_ffn_kinds").toString()).isEqualTo("[\"dense\",\"moe\",\"dense\",\"dense\"]");
    }

    @Test void legacyRopeScalingAndErrors() throws IOException {
        ObjectNode cfg = (ObjectNode) JSON.readTree(Fixtures.require("models/llama/config.json").toFile());
        ObjectNode rp = (ObjectNode) cfg.remove("rope_parameters");
        cfg.put("rope_theta", rp.get("rope_theta").asDouble());
        rp.remove("rope_theta");
        rp.put("type", rp.remove("rope_type").asText());
        cfg.set("rope_scaling", rp);
        ObjectNode legacy = HfArch.fromConfig(HfConfig.of(cfg, "config.json"));
        assertThat(legacy.get("rope")).isEqualTo(arch("llama").get("rope"));

        cfg.put("model_type", "falcon");
        assertThatThrownBy(() -> HfArch.fromConfig(HfConfig.of(cfg, "x/config.json")))
                .isInstanceOf(ConvertException.class).hasMessageContaining("x/config.json").hasMessageContaining("falcon");
        cfg.put("model_type", "llama").put("hidden_size", "big");
        assertThatThrownBy(() -> HfArch.fromConfig(HfConfig.of(cfg, "x/config.json"))).hasMessageContaining("hidden_size");
    }

    /** A layer count that would size per-layer tables at billions of entries is refused before anything is allocated. */
    @Test void absurdLayerCountIsRefused() throws IOException {
        ObjectNode cfg = (ObjectNode) JSON.readTree(Fixtures.require("models/llama/config.json").toFile());
        cfg.put("num_hidden_layers", 2_000_000_000);
        assertThatThrownBy(() -> HfArch.fromConfig(HfConfig.of(cfg, "x/config.json"))).isInstanceOf(ConvertException.class)
                .hasMessageContaining("num_hidden_layers").hasMessageContaining("4096");
    }

    /** Header JSON of a CMF file: offset 128, length at envelope 0x18. */
    static JsonNode readCmfHeader(Path file) throws IOException {
        byte[] head = Arrays.copyOf(Files.readAllBytes(file), 1 << 20);
        ByteBuffer b = ByteBuffer.wrap(head).order(ByteOrder.LITTLE_ENDIAN);
        long off = b.getLong(0x10), len = b.getLong(0x18);
        return JSON.readTree(Arrays.copyOfRange(head, (int) off, (int) (off + len)));
    }
}
