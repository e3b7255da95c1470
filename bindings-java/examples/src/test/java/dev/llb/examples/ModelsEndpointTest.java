package dev.llb.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.llb.Llb;
import dev.llb.ModelInfo;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code GET /v1/models} of the example server, over real HTTP on loopback: each model carries
 * llb's {@code supports_tools} and llama.cpp's {@code caps} map, as {@code llb_model_info} reads
 * them from the GGUF.
 */
class ModelsEndpointTest {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newHttpClient();

    @TempDir
    static Path dir;

    private static HttpResponse<String> get(String url) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create(url)).GET().build(), HttpResponse.BodyHandlers.ofString());
    }

    private static Map<String, Boolean> caps(JsonNode node) {
        Map<String, Boolean> caps = new LinkedHashMap<>();
        node.properties().forEach(e -> {
            assertTrue(e.getValue().isBoolean(), "caps." + e.getKey() + " is a boolean: " + node);
            caps.put(e.getKey(), e.getValue().booleanValue());
        });
        return caps;
    }

    @Test
    void aToolModelIsListedWithSupportsToolsAndItsCaps() throws Exception {
        Path model = Processes.fixture(dir, "tools.gguf", "Qwen-Qwen2.5-7B-Instruct");
        ModelInfo info = Llb.modelInfo(model);
        assertTrue(info.supportsTools());
        try (ServerProcess server = ServerProcess.start(model, dir, "--parallel", "1")) {
            HttpResponse<String> list = get(server.baseUrl + "/models");
            assertEquals(200, list.statusCode(), list.body());
            assertTrue(list.headers().firstValue("Content-Type").orElse("").startsWith("application/json"));
            JsonNode body = MAPPER.readTree(list.body());
            assertEquals("list", body.path("object").asText());
            assertEquals(1, body.path("data").size(), list.body());
            JsonNode m = body.path("data").get(0);
            assertEquals("tools.gguf", m.path("id").asText());
            assertEquals("model", m.path("object").asText());
            assertEquals("llb", m.path("owned_by").asText());
            assertTrue(m.path("supports_tools").isBoolean() && m.path("supports_tools").booleanValue(), m.toString());
            assertEquals(info.caps(), caps(m.path("caps")), "the caps are llb_model_info's");
            assertTrue(m.path("caps").path("supports_tool_calls").booleanValue(), m.toString());

            HttpResponse<String> one = get(server.baseUrl + "/models/tools.gguf");
            assertEquals(200, one.statusCode(), one.body());
            assertEquals(m, MAPPER.readTree(one.body()));

            HttpResponse<String> missing = get(server.baseUrl + "/models/other.gguf");
            assertEquals(404, missing.statusCode());
            assertEquals("model_not_found", MAPPER.readTree(missing.body()).path("error").path("code").asText());
        }
    }

    @Test
    void aRefusedModelIsNotListedButItsCapsSayWhy() throws Exception {
        Path model = Processes.fixture(dir, "plain.gguf", "google-gemma-2-2b-it");
        ModelInfo info = Llb.modelInfo(model);
        assertFalse(info.supportsTools());
        try (ServerProcess server = ServerProcess.start(model, dir, "--parallel", "1")) {
            JsonNode list = MAPPER.readTree(get(server.baseUrl + "/models").body());
            assertEquals(0, list.path("data").size(), "a model llb refused is not listed: " + list);

            HttpResponse<String> one = get(server.baseUrl + "/models/plain.gguf");
            assertEquals(200, one.statusCode(), one.body());
            JsonNode m = MAPPER.readTree(one.body());
            assertEquals("plain.gguf", m.path("id").asText());
            assertTrue(m.path("supports_tools").isBoolean(), m.toString());
            assertFalse(m.path("supports_tools").booleanValue(), m.toString());
            assertEquals(info.caps(), caps(m.path("caps")));
            assertFalse(m.path("caps").path("supports_tool_calls").booleanValue(), m.toString());
        }
    }
}
