package dev.llb.springai.autoconfigure;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.llb.ChatConfig;
import dev.llb.PromptCache;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;

/** {@code llb.chat.*} engine properties, bound by their property names, to the {@link ChatConfig} the bean opens. */
class LlbChatPropertiesTest {
    private static ChatConfig configOf(Map<String, String> properties) {
        LlbChatProperties p = new Binder(new MapConfigurationPropertySource(properties))
                .bindOrCreate(LlbChatProperties.PREFIX, LlbChatProperties.class);
        return LlbChatAutoConfiguration.chatConfig(p, Path.of("model.gguf"));
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
    void unsetSettingsAreLeftToLlb() {
        ChatConfig config = configOf(Map.of());
        assertNull(config.threads());
        assertNull(config.contextSize());
        assertNull(config.promptCache());
        assertEquals(Map.of(), config.backendOptions());
    }
}
