package dev.llb.springai.autoconfigure;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.llb.ChatConfig;
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
    void unsetSettingsAreLeftToLlb() {
        ChatConfig config = configOf(Map.of());
        assertNull(config.threads());
        assertNull(config.contextSize());
        assertEquals(Map.of(), config.backendOptions());
    }
}
