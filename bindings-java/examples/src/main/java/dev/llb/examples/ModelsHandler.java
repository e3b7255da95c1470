package dev.llb.examples;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import dev.llb.ModelInfo;
import java.io.IOException;
import java.util.Map;

/**
 * {@code GET /v1/models} and {@code GET /v1/models/{id}}: the one model this server serves, with
 * OpenAI's fields ({@code id}, {@code object}, {@code created}, {@code owned_by}) plus what llb
 * read from its GGUF ({@code llb_model_info}): {@code supports_tools} (whether llb serves it) and
 * {@code caps}, llama.cpp's capability map of its chat template ({@code supports_tools},
 * {@code supports_tool_calls}, {@code supports_parallel_tool_calls}, {@code supports_system_role}, ...).
 *
 * <p>A model llb refused is not listed (a client listing models looks for one it can use), but
 * {@code GET /v1/models/{id}} still describes it, with {@code supports_tools: false} and the caps
 * that say why.
 */
final class ModelsHandler implements HttpHandler {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private final String modelId;
    private final boolean loaded;
    private final boolean supportsTools;
    private final Map<String, Boolean> caps;
    private final long created = System.currentTimeMillis() / 1000;

    /**
     * {@code loaded}: false when llb refused the model, which is then not listed. {@code info}: the
     * model's {@link ModelInfo}; {@code refusedCaps}: the caps of llb's refusal, used when
     * {@code info} is null.
     */
    ModelsHandler(String modelId, boolean loaded, ModelInfo info, Map<String, Boolean> refusedCaps) {
        this.modelId = modelId;
        this.loaded = loaded;
        this.supportsTools = info != null ? info.supportsTools() : loaded;
        this.caps = info != null ? info.caps() : refusedCaps == null ? Map.of() : refusedCaps;
    }

    @Override
    public void handle(HttpExchange exchange) throws IOException {
        try (exchange) {
            String path = exchange.getRequestURI().getPath();
            if (!exchange.getRequestMethod().equals("GET")) {
                Exchanges.error(exchange, ApiError.invalidRequest(405, "method_not_allowed", "use GET for " + path));
            } else if (path.equals("/v1/models")) {
                ObjectNode list = MAPPER.createObjectNode().put("object", "list");
                ArrayNode data = list.putArray("data");
                if (loaded) {
                    data.add(model());
                }
                Exchanges.json(exchange, 200, list.toString());
            } else if (path.equals("/v1/models/" + modelId)) {
                Exchanges.json(exchange, 200, model().toString());
            } else {
                Exchanges.error(exchange, ApiError.invalidRequest(404, "model_not_found",
                        "The model `" + path.substring(path.lastIndexOf('/') + 1) + "` does not exist"));
            }
        }
    }

    private ObjectNode model() {
        ObjectNode model = MAPPER.createObjectNode().put("id", modelId).put("object", "model").put("created", created)
                .put("owned_by", "llb").put("supports_tools", supportsTools);
        ObjectNode capsNode = model.putObject("caps");
        caps.forEach(capsNode::put);
        return model;
    }
}
