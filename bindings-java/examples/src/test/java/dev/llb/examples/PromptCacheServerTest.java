package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.llb.PromptCache;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The example server's {@code --prompt-cache-*} flags: parsed into llb's {@code prompt_cache},
 * and a server restarted on the directory the stopped one wrote restores the prompt instead of
 * reading it.
 */
class PromptCacheServerTest {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newHttpClient();

    @TempDir
    static Path dir;

    private static OpenAiServer.Options parse(String... flags) {
        List<String> args = new java.util.ArrayList<>(List.of("--model", "m.gguf", "--port", "0"));
        args.addAll(List.of(flags));
        return OpenAiServer.Options.parse(args.toArray(String[]::new));
    }

    @Test
    void theFlagsAreLlbsPromptCache() {
        assertNull(parse().promptCache(), "no flag: llb's defaults");
        assertEquals(new PromptCache(1024L, Path.of("/var/cache/llb"), 1L << 33),
                parse("--prompt-cache-dir", "/var/cache/llb", "--prompt-cache-ram-bytes", "1024",
                        "--prompt-cache-disk-bytes", "8589934592").promptCache());
        assertEquals(PromptCache.OFF, parse("--prompt-cache-ram-bytes", "0").promptCache());
        assertEquals(PromptCache.onDisk(Path.of("cache")), parse("--prompt-cache-dir", "cache").promptCache());
        assertThrows(NumberFormatException.class, () -> parse("--prompt-cache-disk-bytes", "16GB"));
    }

    private static JsonNode complete(ServerProcess server, String body) throws Exception {
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(server.baseUrl + "/chat/completions"))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), r.body());
        return MAPPER.readTree(r.body());
    }

    @Test
    void aRestartedServerRestoresThePromptFromTheDirectory() throws Exception {
        Path model = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
        Path cacheDir = dir.resolve("prompt-cache");
        // hundreds of tokens: llb keeps prompts of 64 tokens or more
        String system = IntStream.range(0, 100).mapToObj(i -> "lighthouse" + (i % 37)).collect(Collectors.joining(" "));
        String body = MAPPER.writeValueAsString(Map.of("messages", List.of(Map.of("role", "system", "content", system),
                Map.of("role", "user", "content", "What is the answer?")), "tool_choice", "none", "max_tokens", 4));
        String[] flags = {"--parallel", "1", "--ctx", "1024", "--prompt-cache-dir", cacheDir.toString(),
                "--prompt-cache-disk-bytes", "67108864"};
        JsonNode first;
        try (ServerProcess server = ServerProcess.start(model, dir, flags)) {
            first = complete(server, body);
        } // SIGTERM: the shutdown hook closes the pool, which writes its conversation to the directory
        assertEquals(0, first.path("usage").path("prompt_tokens_details").path("cached_tokens").asInt(-1), first.toString());
        try (ServerProcess server = ServerProcess.start(model, dir, flags)) {
            JsonNode second = complete(server, body);
            int prompt = second.path("usage").path("prompt_tokens").asInt();
            int cached = second.path("usage").path("prompt_tokens_details").path("cached_tokens").asInt(-1);
            assertEquals(first.path("usage").path("prompt_tokens").asInt(), prompt);
            assertTrue(prompt > 200 && cached * 10 >= prompt * 9, "cached " + cached + " of " + prompt + ": " + second);
            assertEquals(cached, second.path("timings").path("cache_restored_n").asInt(-1), second.toString());
        }
    }
}
