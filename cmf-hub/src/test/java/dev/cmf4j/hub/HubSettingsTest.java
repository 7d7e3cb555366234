package dev.cmf4j.hub;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** hf:// names and the environment variables huggingface_hub reads, read the same way. */
class HubSettingsTest {
    @TempDir Path tmp;

    @Test void parsesHubUris() {
        assertThat(HubUri.parse("hf://Qwen/Qwen3-0.6B")).isEqualTo(new HubUri("Qwen/Qwen3-0.6B", "main"));
        HubUri tagged = HubUri.parse("hf://google/gemma-3-1b-it@v1.0");
        assertThat(tagged.revision()).isEqualTo("v1.0");
        assertThat(tagged.pinned()).isFalse();
        assertThat(tagged.cacheFolder()).isEqualTo("models--google--gemma-3-1b-it");
        assertThat(HubUri.parse("hf://gpt2").cacheFolder()).isEqualTo("models--gpt2");
        assertThat(HubUri.parse("hf://a/b@refs/pr/1").revision()).isEqualTo("refs/pr/1");
        assertThat(HubUri.parse("hf://a/b@" + "0123456789abcdef".repeat(2) + "01234567").pinned()).isTrue();
        assertThat(HubUri.parse("hf://a/b@dev")).hasToString("hf://a/b@dev");
        assertThat(HubUri.parse("hf://a/b")).hasToString("hf://a/b");
        for (String bad : new String[] {"Qwen/Qwen3", "hf://", "hf://a/b/c", "hf://a--b/c", "hf://a/../b", "hf://a/b@", "hf://a/b@../x",
                "hf://a/b@/etc", "hf://a b/c", "hf://-a/b"})
            assertThatThrownBy(() -> HubUri.parse(bad)).as(bad).isInstanceOf(HubException.class);
        assertThat(HubApi.segment("refs/pr/1")).isEqualTo("refs%2Fpr%2F1");
        assertThat(HubApi.path("sub dir/a+b.json")).isEqualTo("sub%20dir/a%2Bb.json");
    }

    @Test void readsTheEnvironmentLikeHuggingfaceHub() throws Exception {
        HubSettings d = HubSettings.fromEnvironment(Map.of("HOME", "/home/u"));
        assertThat(d.endpoint()).isEqualTo(URI.create("https://huggingface.co"));
        assertThat(d.cache()).isEqualTo(Path.of("/home/u/.cache/huggingface/hub"));
        assertThat(d.token()).isNull();
        assertThat(d.offline()).isFalse();

        assertThat(HubSettings.fromEnvironment(Map.of("HOME", "/h", "XDG_CACHE_HOME", "/x")).cache()).isEqualTo(Path.of("/x/huggingface/hub"));
        Path home = Files.createDirectories(tmp.resolve("hf"));
        Files.writeString(home.resolve("token"), "hf_fromfile\n");
        HubSettings h = HubSettings.fromEnvironment(Map.of("HF_HOME", home.toString(), "HF_ENDPOINT", "http://127.0.0.1:9/",
                "HF_HUB_OFFLINE", "1"));
        assertThat(h.cache()).isEqualTo(home.resolve("hub"));
        assertThat(h.token()).as("the file hf auth login writes").isEqualTo("hf_fromfile");
        assertThat(h.endpoint()).isEqualTo(URI.create("http://127.0.0.1:9"));
        assertThat(h.offline()).isTrue();
        assertThat(h.toString()).doesNotContain("hf_fromfile");

        HubSettings e = HubSettings.fromEnvironment(Map.of("HF_HOME", home.toString(), "HF_HUB_CACHE", "/c", "HF_TOKEN", " hf_env "));
        assertThat(e.cache()).isEqualTo(Path.of("/c"));
        assertThat(e.token()).isEqualTo("hf_env");
        assertThatThrownBy(() -> HubSettings.fromEnvironment(Map.of("HF_ENDPOINT", "ftp://x"))).hasMessageContaining("http(s)");
    }
}
