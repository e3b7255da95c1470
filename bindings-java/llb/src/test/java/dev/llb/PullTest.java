package dev.llb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link Llb#pull} against a minimal Hugging Face hub on 127.0.0.1 (the JDK's HTTP server): the
 * listing, the resolve endpoint, and a tool-capable and a non-tool fixture to download.
 */
class PullTest {
    private static final String COMMIT = "0123456789abcdef0123456789abcdef01234567";
    private static HttpServer hub;
    private static String endpoint;

    @TempDir static Path models;

    private record Repo(String name, String file, byte[] bytes, String sha256) {}

    private static final List<Repo> REPOS = new ArrayList<>();

    @BeforeAll
    static void startHub() throws Exception {
        REPOS.add(repo("acme/qwen-tools-GGUF", "qwen-tools-Q4_K_M.gguf", Fixtures.toolModel(models)));
        REPOS.add(repo("acme/gemma-plain-GGUF", "gemma-plain-Q4_K_M.gguf", Fixtures.plainModel(models)));
        hub = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        hub.createContext("/", exchange -> {
            String path = exchange.getRequestURI().getPath();
            for (Repo r : REPOS) {
                if (path.startsWith("/api/models/" + r.name + "/")) {
                    String listing = "{\"id\":\"" + r.name + "\",\"sha\":\"" + COMMIT + "\",\"private\":false,\"gated\":false,"
                            + "\"disabled\":false,\"siblings\":[{\"rfilename\":\"" + r.file + "\",\"size\":" + r.bytes.length
                            + ",\"lfs\":{\"sha256\":\"" + r.sha256 + "\",\"size\":" + r.bytes.length + "}}]}";
                    send(exchange, 200, "application/json", listing.getBytes(StandardCharsets.UTF_8));
                    return;
                }
                if (path.equals("/" + r.name + "/resolve/" + COMMIT + "/" + r.file)) {
                    exchange.getResponseHeaders().add("X-Repo-Commit", COMMIT);
                    exchange.getResponseHeaders().add("X-Linked-Etag", "\"" + r.sha256 + "\"");
                    send(exchange, 200, "application/octet-stream", r.bytes);
                    return;
                }
            }
            exchange.getResponseHeaders().add("X-Error-Code", "RepoNotFound");
            send(exchange, 401, "text/plain", "Repository not found".getBytes(StandardCharsets.UTF_8));
        });
        hub.start();
        endpoint = "http://127.0.0.1:" + hub.getAddress().getPort();
    }

    @AfterAll
    static void stopHub() {
        hub.stop(0);
    }

    private static Repo repo(String name, String file, Path fixture) throws Exception {
        byte[] bytes = Files.readAllBytes(fixture);
        String sha = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
        return new Repo(name, file, bytes, sha);
    }

    private static void send(com.sun.net.httpserver.HttpExchange ex, int status, String type, byte[] body) throws IOException {
        ex.getResponseHeaders().add("Content-Type", type);
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    private static String request(String repo, Path cache) {
        return "{\"repo\":\"" + repo + "\",\"cache_dir\":\"" + cache + "\",\"endpoint\":\"" + endpoint + "\",\"token\":\"\"}";
    }

    @Test
    void pullsVerifiesAndOpensAToolCapableModel() throws Exception {
        Path cache = Files.createTempDirectory(models, "cache");
        List<String> events = new ArrayList<>();
        JsonNode result = Json.parse(Llb.pull(request("acme/qwen-tools-GGUF", cache), events::add, null));
        assertEquals("pull_result", result.path("type").asText());
        assertFalse(result.path("from_cache").asBoolean());
        assertEquals(REPOS.get(0).sha256, result.path("sha256").get(0).asText());
        assertTrue(result.path("model_info").path("supports_tools").asBoolean());
        assertTrue(events.stream().anyMatch(e -> e.contains("\"type\":\"pull_resolved\"")), events.toString());
        Path file = Path.of(result.path("path").asText());
        assertTrue(file.startsWith(cache), file + " lands in the cache");
        try (ChatEngine engine = ChatEngine.open(Fixtures.config(file))) {
            assertEquals("tool_calls", Json.parse(engine.infer(Requests.toolRequired())).path("choices").get(0).path("finish_reason").asText());
        }
        // A second pull is served from the cache.
        JsonNode again = Json.parse(Llb.pull(request("acme/qwen-tools-GGUF", cache), null, null));
        assertTrue(again.path("from_cache").asBoolean());
    }

    @Test
    void aNonToolModelIsRefusedAndErrorsCarryCodes() throws Exception {
        Path cache = Files.createTempDirectory(models, "cache");
        ToolsUnsupportedException refused = assertThrows(ToolsUnsupportedException.class,
                () -> Llb.pull(request("acme/gemma-plain-GGUF", cache), null, null));
        assertFalse(refused.caps().get("supports_tools"));
        assertEquals("repo_not_found", assertThrows(LlbException.class,
                () -> Llb.pull(request("acme/missing-GGUF", cache), null, null)).code());
        assertEquals("invalid_json", assertThrows(LlbException.class, () -> Llb.pull("{nope", null, null)).code());
        CancellationToken cancelled = new CancellationToken();
        cancelled.cancel();
        assertEquals("cancelled", assertThrows(LlbException.class,
                () -> Llb.pull(request("acme/qwen-tools-GGUF", cache), e -> {}, cancelled)).code());
    }
}
