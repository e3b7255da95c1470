package dev.llb.springai.autoconfigure;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.llb.ChatConfig;
import java.io.InputStream;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.boot.context.properties.source.MapConfigurationPropertySource;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * llb as a Spring AI provider: {@code spring.ai.model.chat} selects it or backs it off, the
 * generated metadata lists and documents every {@code llb.chat.*} key, the old pull keys still bind,
 * and the device and KV-cache keys reach llb's config. No model is opened here.
 */
class ProviderSelectionTest {
    final ApplicationContextRunner runner = new ApplicationContextRunner()
            .withConfiguration(AutoConfigurations.of(LlbChatAutoConfiguration.class));

    @Test
    void anotherProviderBacksLlbOff() {
        // No model-path: had the auto-configuration run, start-up would fail asking for one.
        for (String other : List.of("ollama", "openai", "none")) {
            runner.withPropertyValues("spring.ai.model.chat=" + other).run(context -> {
                assertNull(context.getStartupFailure(), other);
                assertFalse(context.containsBean("llbChatModel"), other);
                assertEquals(0, context.getBeanNamesForType(ChatModel.class).length, other);
                assertEquals(0, context.getBeanNamesForType(LlbChatProperties.class).length, other);
            });
        }
    }

    @Test
    void llbOrNoValueSelectsLlb() {
        for (String[] values : List.of(new String[] {"spring.ai.model.chat=llb"}, new String[0])) {
            runner.withPropertyValues(values).run(context -> {
                Throwable failure = context.getStartupFailure();
                // Selected: the auto-configuration ran and asks for the model.
                assertTrue(failure != null && String.valueOf(rootMessage(failure)).contains("set llb.chat.model-path"),
                        String.valueOf(failure));
            });
        }
    }

    private static String rootMessage(Throwable t) {
        while (t.getCause() != null) {
            t = t.getCause();
        }
        return t.getMessage();
    }

    @Test
    void theMetadataDocumentsEveryKeyWithItsDefault() throws Exception {
        JsonNode metadata;
        try (InputStream in = getClass().getResourceAsStream("/META-INF/spring-configuration-metadata.json")) {
            metadata = new ObjectMapper().readTree(in);
        }
        Map<String, JsonNode> byName = new HashMap<>();
        for (JsonNode p : metadata.path("properties")) {
            byName.put(p.path("name").asText(), p);
        }
        Set<String> expected = new TreeSet<>(List.of("enabled", "model-path", "parallel", "max-queue", "timeout",
                "context-size", "threads", "adaptive-threads", "thread-poll", "batch-size", "gpu-layers", "main-gpu",
                "split-mode", "tensor-split", "devices", "flash-attn", "offload-kqv", "cache-type-k", "cache-type-v",
                "mmap", "mlock", "rpc-servers", "pull.repo", "pull.quant", "pull.file", "pull.revision", "pull.cache-dir",
                "pull.hub-endpoint", "pull.token", "pull.offline", "prompt-cache.ram-bytes", "prompt-cache.dir",
                "prompt-cache.disk-bytes", "speculative.type", "speculative.draft-max", "speculative.draft-min",
                "speculative.draft-model-path", "speculative.draft-n-gpu-layers", "options.model", "options.temperature",
                "options.top-p", "options.top-k", "options.max-tokens", "options.seed", "options.tool-choice",
                "options.tool-choice-after-tools", "options.parallel-tool-calls", "options.reasoning-effort",
                "options.reasoning-budget", "options.speculative"));
        Set<String> deprecated = Set.of("model", "quant", "file", "revision", "cache-dir", "hub-endpoint", "token", "offline");
        Set<String> all = new TreeSet<>(expected);
        all.addAll(deprecated);
        assertEquals(all.stream().map(k -> "llb.chat." + k).collect(java.util.stream.Collectors.toCollection(TreeSet::new)),
                new TreeSet<>(byName.keySet().stream().filter(k -> k.startsWith("llb.chat.")).toList()));
        for (String key : all) {
            JsonNode p = byName.get("llb.chat." + key);
            assertFalse(p.path("description").asText().isBlank(), key + " has no description");
            assertEquals(deprecated.contains(key), p.has("deprecation"), key);
        }
        assertEquals("llb.chat.pull.repo", byName.get("llb.chat.model").path("deprecation").path("replacement").asText());
        Map<String, String> defaults = Map.of("enabled", "true", "parallel", "4", "pull.offline", "false", "batch-size", "512",
                "adaptive-threads", "true", "thread-poll", "0", "pull.revision", "main", "prompt-cache.disk-bytes", "16GB",
                "mmap", "true", "flash-attn", "auto");
        defaults.forEach((key, value) -> assertEquals(value, byName.get("llb.chat." + key).path("defaultValue").asText(), key));
        assertTrue(byName.get("llb.chat.pull.cache-dir").path("description").asText().contains("~/.chatbot_models"));
    }

    @Test
    void theOldPullKeysAreAliasesOfTheNewOnes() {
        LlbChatProperties p = new Binder(new MapConfigurationPropertySource(Map.of("llb.chat.model", "acme/x-GGUF",
                "llb.chat.quant", "Q8_0", "llb.chat.cache-dir", "/tmp/m", "llb.chat.offline", "true")))
                .bindOrCreate(LlbChatProperties.PREFIX, LlbChatProperties.class);
        assertEquals("acme/x-GGUF", p.getPull().getRepo());
        assertEquals("Q8_0", p.getPull().getQuant());
        assertEquals(Path.of("/tmp/m"), p.getPull().getCacheDir());
        assertTrue(p.getPull().isOffline());
    }

    @Test
    void deviceAndCacheKeysReachLlbsConfig() {
        LlbChatProperties p = new Binder(new MapConfigurationPropertySource(Map.of("llb.chat.main-gpu", "1",
                "llb.chat.split-mode", "row", "llb.chat.tensor-split", "0.25,0.75", "llb.chat.devices", "CUDA0,CUDA1",
                "llb.chat.flash-attn", "on", "llb.chat.offload-kqv", "false", "llb.chat.cache-type-k", "q8_0",
                "llb.chat.cache-type-v", "q4_0", "llb.chat.mmap", "false", "llb.chat.mlock", "true")))
                .bindOrCreate(LlbChatProperties.PREFIX, LlbChatProperties.class);
        p.setRpcServers(List.of("127.0.0.1:50052"));
        ChatConfig config = LlbChatAutoConfiguration.chatConfig(p, Path.of("m.gguf"));
        Map<String, Object> expected = new HashMap<>(Map.of("main_gpu", 1, "split_mode", "row", "tensor_split", List.of(0.25, 0.75),
                "devices", List.of("CUDA0", "CUDA1"), "flash_attn", "on", "offload_kqv", false, "type_k", "q8_0",
                "type_v", "q4_0", "use_mmap", false, "use_mlock", true));
        expected.put("rpc_servers", List.of("127.0.0.1:50052"));
        assertEquals(expected, config.backendOptions());
    }
}
