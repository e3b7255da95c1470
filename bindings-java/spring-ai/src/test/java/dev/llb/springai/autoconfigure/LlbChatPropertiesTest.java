package dev.llb.springai.autoconfigure;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.llb.ChatConfig;
import dev.llb.PromptCache;
import dev.llb.Speculative;
import dev.llb.springai.LlbChatOptions;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;

/** {@code llb.chat.*} engine properties, bound by their property names, to the {@link ChatConfig} the bean opens. */
class LlbChatPropertiesTest {
    private static LlbChatProperties bind(Map<String, String> properties) {
        return new Binder(new MapConfigurationPropertySource(properties))
                .bindOrCreate(LlbChatProperties.PREFIX, LlbChatProperties.class);
    }

    private static ChatConfig configOf(Map<String, String> properties) {
        return LlbChatAutoConfiguration.chatConfig(bind(properties), Path.of("model.gguf"));
    }

    @Test
    void engineSettingsReachTheConfig() {
        ChatConfig config = configOf(Map.of("llb.chat.threads", "3", "llb.chat.adaptive-threads", "false",
                "llb.chat.thread-poll", "50", "llb.chat.context-size", "2048", "llb.chat.batch-size", "256",
                "llb.chat.gpu-layers", "0"));
        assertEquals(3, config.threads());
        assertEquals(2048, config.contextSize());
        assertEquals(256, config.batchSize());
        // backendOptions is written into llb's config JSON as it is (ChatConfig.toJson).
        assertEquals(Map.of("adaptive_threads", false, "thread_poll", 50, "n_gpu_layers", 0), config.backendOptions());
        assertEquals(Map.of("adaptive_threads", true), configOf(Map.of("llb.chat.adaptive-threads", "true")).backendOptions());
    }

    @Test
    void promptCacheSettingsReachTheConfig() {
        ChatConfig config = configOf(Map.of("llb.chat.prompt-cache.ram-bytes", "0",
                "llb.chat.prompt-cache.dir", "/var/cache/llb/prompts", "llb.chat.prompt-cache.disk-bytes", "4GB"));
        assertEquals(new PromptCache(0L, Path.of("/var/cache/llb/prompts"), 4L << 30), config.promptCache());
        // written into llb's config JSON as it is: sizes in bytes (Spring's units are binary), the directory as text
        assertEquals(Map.of("prompt_cache", Map.of("ram_bytes", 0L, "dir", "/var/cache/llb/prompts", "disk_bytes", 4L << 30)),
                config.backendOptions());
        assertEquals(Map.of("prompt_cache", Map.of("ram_bytes", 536870912L)),
                configOf(Map.of("llb.chat.prompt-cache.ram-bytes", "536870912")).backendOptions());
        assertEquals(new PromptCache(null, Path.of("cache"), null),
                configOf(Map.of("llb.chat.prompt-cache.dir", "cache")).promptCache());
    }

    @Test
    void speculativeSettingsReachTheConfig() {
        ChatConfig config = configOf(Map.of("llb.chat.speculative.type", "draft-simple",
                "llb.chat.speculative.draft-max", "12", "llb.chat.speculative.draft-min", "2",
                "llb.chat.speculative.draft-model-path", "/models/draft.gguf", "llb.chat.speculative.draft-n-gpu-layers", "-1"));
        assertEquals(new Speculative("draft-simple", 12, 2, Path.of("/models/draft.gguf"), -1, null), config.speculative());
        // written into llb's config JSON as it is, by llb's field names
        assertEquals(Map.of("speculative", Map.of("type", "draft-simple", "draft_max", 12, "draft_min", 2,
                "draft_model_path", "/models/draft.gguf", "draft_n_gpu_layers", -1)), config.backendOptions());
        // Only what is set: llb picks the rest (the type, the draft sizes).
        assertEquals(Map.of("speculative", Map.of("type", "none")),
                configOf(Map.of("llb.chat.speculative.type", "none")).backendOptions());
        assertEquals(Map.of("speculative", Map.of("draft_max", 32)),
                configOf(Map.of("llb.chat.speculative.draft-max", "32")).backendOptions());
        assertEquals(Speculative.ngram("ngram-mod"), configOf(Map.of("llb.chat.speculative.type", "ngram-mod")).speculative());
    }

    @Test
    void badSpeculativeSettingsFailNamingTheField() {
        for (Map.Entry<String, String> bad : Map.of("type", "ngram", "draft-max", "0", "draft-min", "-1").entrySet()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> configOf(Map.of("llb.chat.speculative." + bad.getKey(), bad.getValue())));
            String field = "speculative." + bad.getKey().replace('-', '_');
            assertTrue(e.getMessage().startsWith("llb.chat.speculative.*: " + field + " "), e.getMessage());
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> configOf(Map.of(
                "llb.chat.speculative.draft-max", "4", "llb.chat.speculative.draft-min", "5")));
        assertTrue(e.getMessage().contains("speculative.draft_min must be 0 to draft_max (4), not 5"), e.getMessage());
    }

    @Test
    void theSpeculativeOptionIsADefaultRequestOption() {
        LlbChatOptions on = LlbChatAutoConfiguration.defaultOptions(
                bind(Map.of("llb.chat.options.speculative", "true", "llb.chat.options.temperature", "0.2")).getOptions());
        assertEquals(true, on.getSpeculative());
        assertEquals(0.2, on.getTemperature());
        assertEquals(false, LlbChatAutoConfiguration.defaultOptions(
                bind(Map.of("llb.chat.options.speculative", "false")).getOptions()).getSpeculative());
        assertNull(LlbChatAutoConfiguration.defaultOptions(bind(Map.of()).getOptions()).getSpeculative());
    }

    @Test
    void unsetSettingsAreLeftToLlb() {
        ChatConfig config = configOf(Map.of());
        assertNull(config.threads());
        assertNull(config.contextSize());
        assertNull(config.promptCache());
        assertNull(config.speculative());
        assertEquals(Map.of(), config.backendOptions());
    }
}
