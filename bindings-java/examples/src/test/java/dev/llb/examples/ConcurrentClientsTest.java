package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The example server under 16 concurrent HTTP clients, served by one llb pool: every client gets
 * its tool call (plain or streamed), none is turned away, and the shared prompt prefix is reused.
 */
class ConcurrentClientsTest {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final int CLIENTS = 16;

    @TempDir
    static Path dir;

    private static String request(int i, boolean stream) {
        String city = List.of("Paris", "Tokyo", "Lima").get(i % 3);
        return """
                {"model":"m","messages":[{"role":"system","content":"You are a weather assistant. Call tools."},
                  {"role":"user","content":"Weather in %s, client %d?"}],
                 "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
                   "properties":{"city":{"type":"string","enum":["Paris","Tokyo","Lima"]},
                                 "days":{"type":"integer","minimum":1,"maximum":7}},
                   "required":["city","days"],"additionalProperties":false}}}],
                 "tool_choice":"required","max_tokens":48,"seed":%d,"stream":%b,
                 "stream_options":{"include_usage":true}}""".formatted(city, i, i, stream);
    }

    @Test
    void sixteenClientsAtOnceAllGetTheirToolCalls() throws Exception {
        Path model = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
        try (ServerProcess server = ServerProcess.start(model, dir, "--parallel", "4");
                ExecutorService clients = Executors.newFixedThreadPool(CLIENTS)) {
            HttpClient http = HttpClient.newHttpClient();
            List<Future<JsonNode>> answers = new ArrayList<>();
            for (int i = 0; i < CLIENTS; i++) {
                int n = i;
                answers.add(clients.submit(() -> call(http, server.baseUrl, n)));
            }
            int cached = 0;
            for (int i = 0; i < CLIENTS; i++) {
                JsonNode answer = answers.get(i).get(300, TimeUnit.SECONDS);
                JsonNode call = answer.path("tool_calls").path(0);
                assertEquals("get_weather", call.path("name").asText(), "client " + i + ": " + answer);
                JsonNode args = MAPPER.readTree(call.path("arguments").asText());
                assertTrue(List.of("Paris", "Tokyo", "Lima").contains(args.path("city").asText()), args.toString());
                int days = args.path("days").asInt(0);
                assertTrue(days >= 1 && days <= 7, args.toString());
                cached += answer.path("cached_tokens").asInt();
            }
            assertTrue(cached > 0, "16 requests with one system prompt and tool list shared no prefix");
        }
    }

    /** One client's request; returns {tool_calls:[{name,arguments}], cached_tokens}. */
    private static JsonNode call(HttpClient http, String baseUrl, int i) throws Exception {
        boolean stream = i % 2 == 1;
        HttpRequest req = HttpRequest.newBuilder(URI.create(baseUrl + "/chat/completions"))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(request(i, stream))).build();
        HttpResponse<String> resp = http.send(req, HttpResponse.BodyHandlers.ofString());
        assertEquals(200, resp.statusCode(), resp.body());
        var out = MAPPER.createObjectNode();
        var calls = out.putArray("tool_calls");
        if (!stream) {
            JsonNode root = MAPPER.readTree(resp.body());
            JsonNode fn = root.path("choices").path(0).path("message").path("tool_calls").path(0).path("function");
            calls.addObject().put("name", fn.path("name").asText()).put("arguments", fn.path("arguments").asText());
            out.put("cached_tokens", root.path("usage").path("prompt_tokens_details").path("cached_tokens").asInt());
            return out;
        }
        // Deltas grouped by their call's index (parallel calls are allowed; the test checks the first).
        List<StringBuilder[]> parts = new ArrayList<>();
        boolean done = false;
        for (String line : resp.body().split("\n")) {
            if (!line.startsWith("data: ")) {
                continue;
            }
            String data = line.substring(6).trim();
            if (data.equals("[DONE]")) {
                done = true;
                continue;
            }
            JsonNode chunk = MAPPER.readTree(data);
            if (chunk.has("usage") && !chunk.path("usage").isNull()) {
                out.put("cached_tokens", chunk.path("usage").path("prompt_tokens_details").path("cached_tokens").asInt());
            }
            for (JsonNode tc : chunk.path("choices").path(0).path("delta").path("tool_calls")) {
                int index = tc.path("index").asInt(-1);
                assertTrue(index >= 0 && index <= parts.size(), "a tool call delta's index: " + tc);
                if (index == parts.size()) {
                    parts.add(new StringBuilder[] {new StringBuilder(), new StringBuilder()});
                }
                parts.get(index)[0].append(tc.path("function").path("name").asText(""));
                parts.get(index)[1].append(tc.path("function").path("arguments").asText(""));
            }
        }
        assertTrue(done, "the stream ended without [DONE]: " + resp.body());
        for (StringBuilder[] p : parts) {
            calls.addObject().put("name", p[0].toString()).put("arguments", p[1].toString());
        }
        return out;
    }
}
