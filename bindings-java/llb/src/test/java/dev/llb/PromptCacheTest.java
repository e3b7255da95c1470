package dev.llb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code prompt_cache} through Java (issue 33): {@link ChatConfig#withPromptCache} writes llb's
 * object, llb refuses bad settings by name, and a pool opened on the directory an engine wrote
 * when it was closed (a restarted process) restores the prompt instead of reading it.
 */
class PromptCacheTest {
    @TempDir
    static Path dir;
    static Path tools;

    @BeforeAll
    static void fixture() {
        tools = Fixtures.toolModel(dir);
    }

    @Test
    void thePromptCacheIsWrittenAsLlbsObject() {
        Path cacheDir = Path.of("/var/cache/llb");
        ChatConfig config = Fixtures.config(tools)
                .withPromptCache(PromptCache.onDisk(cacheDir).withRamBytes(0).withDiskBytes(1L << 33));
        JsonNode json = Json.parse(config.toJson()).path("prompt_cache");
        assertEquals(Json.parse("{\"ram_bytes\":0,\"dir\":\"/var/cache/llb\",\"disk_bytes\":8589934592}"), json,
                config.toJson());
        assertEquals(new PromptCache(0L, cacheDir, 1L << 33), config.promptCache());

        // Unset fields are left out (llb's defaults); DEFAULT is an empty object, OFF only ram_bytes 0.
        assertEquals(Json.parse("{\"dir\":\"/var/cache/llb\"}"),
                Json.parse(Fixtures.config(tools).withPromptCache(PromptCache.onDisk(cacheDir)).toJson()).path("prompt_cache"));
        assertEquals(Json.parse("{}"),
                Json.parse(Fixtures.config(tools).withPromptCache(PromptCache.DEFAULT).toJson()).path("prompt_cache"));
        assertEquals(Json.parse("{\"ram_bytes\":0}"),
                Json.parse(Fixtures.config(tools).withPromptCache(PromptCache.OFF).toJson()).path("prompt_cache"));
        assertTrue(Json.parse(Fixtures.config(tools).toJson()).path("prompt_cache").isMissingNode());
        assertNull(Fixtures.config(tools).promptCache());
        // The last one set wins, as with every option.
        assertEquals(PromptCache.OFF,
                Fixtures.config(tools).withPromptCache(PromptCache.onDisk(cacheDir)).withPromptCache(PromptCache.OFF).promptCache());
    }

    @Test
    void badSettingsAreRefusedByName() throws IOException {
        Path file = Files.writeString(dir.resolve("not-a-dir"), "x");
        for (PromptCache bad : List.of(PromptCache.DEFAULT.withDiskBytes(1 << 20), PromptCache.onDisk(Path.of("")),
                PromptCache.onDisk(file.resolve("sub")))) {
            ChatConfig config = Fixtures.config(tools).withPromptCache(bad);
            LlbException engine = assertThrows(LlbException.class, () -> ChatEngine.open(config).close(), config.toJson());
            LlbException pool = assertThrows(LlbException.class, () -> ChatPool.open(config, 2).close(), config.toJson());
            for (LlbException e : List.of(engine, pool)) {
                assertEquals("invalid_argument", e.code(), config.toJson() + ": " + e.getMessage());
                assertTrue(e.getMessage().contains("prompt_cache."), config.toJson() + ": " + e.getMessage());
            }
        }
    }

    /** A long system prompt (hundreds of tokens: llb keeps prompts of 64 tokens or more). */
    private static String request() {
        String system = IntStream.range(0, 100).mapToObj(i -> "lighthouse" + (i % 37)).collect(Collectors.joining(" "));
        return Json.MAPPER.valueToTree(Map.of("messages", List.of(Map.of("role", "system", "content", system),
                        Map.of("role", "user", "content", "What is the answer?")),
                "tool_choice", "none", "max_tokens", 8, "temperature", 0)).toString();
    }

    private static List<Path> files(Path cacheDir) throws IOException {
        try (Stream<Path> s = Files.list(cacheDir)) {
            return s.filter(p -> p.toString().endsWith(".llbkv")).toList();
        }
    }

    @Test
    void aPoolOpenedOnAClosedEnginesDirRestoresThePrompt() throws IOException {
        Path cacheDir = dir.resolve("prompt-cache");
        ChatConfig config = Fixtures.config(tools).withPromptCache(PromptCache.onDisk(cacheDir));
        String request = request();

        JsonNode first;
        try (ChatEngine engine = ChatEngine.open(config)) {
            first = Json.parse(engine.infer(request));
        }
        assertEquals(0, first.path("usage").path("prompt_tokens_details").path("cached_tokens").asInt(-1), first.toString());
        assertEquals(1, files(cacheDir).size(), "written when the engine was closed: " + files(cacheDir));

        try (ChatPool pool = ChatPool.open(config, 2)) {
            JsonNode second = Json.parse(pool.infer(request));
            int prompt = second.path("usage").path("prompt_tokens").asInt();
            int cached = second.path("usage").path("prompt_tokens_details").path("cached_tokens").asInt(-1);
            assertEquals(first.path("usage").path("prompt_tokens").asInt(), prompt);
            assertTrue(prompt > 200 && cached * 10 >= prompt * 9, "cached " + cached + " of " + prompt + ": " + second);
            // A fresh pool held nothing: every cached token came from the file.
            assertEquals(cached, second.path("timings").path("cache_restored_n").asInt(-1), second.toString());
            assertTrue(second.path("timings").path("cache_restore_ms").asDouble() > 0, second.toString());
            assertTrue(second.path("warnings").isMissingNode() || second.path("warnings").isEmpty(), second.toString());
            // Restored equals recomputed: temperature 0 gives the cold run's reply.
            assertEquals(first.path("choices").get(0).path("message").path("content"),
                    second.path("choices").get(0).path("message").path("content"));
            JsonNode stats = Json.parse(pool.stats()).path("prompt_cache");
            assertEquals(1, stats.path("hits_disk").asInt(-1), stats.toString());
            assertEquals(cached, stats.path("restored_tokens").asInt(-1), stats.toString());
        }
    }
}
