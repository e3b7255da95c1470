package dev.llb.examples;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import java.io.IOException;

/** {@code GET /v1/models} and {@code GET /v1/models/{id}}: the one model this server serves. */
final class ModelsHandler implements HttpHandler {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private final String modelId;
    private final boolean loaded;
    private final long created = System.currentTimeMillis() / 1000;

    /** {@code loaded}: false when llb refused the model, which is then not listed. */
    ModelsHandler(String modelId, boolean loaded) {
        this.modelId = modelId;
        this.loaded = loaded;
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
            } else if (loaded && path.equals("/v1/models/" + modelId)) {
                Exchanges.json(exchange, 200, model().toString());
            } else {
                Exchanges.error(exchange, ApiError.invalidRequest(404, "model_not_found",
                        "The model `" + path.substring(path.lastIndexOf('/') + 1) + "` does not exist"));
            }
        }
    }

    private ObjectNode model() {
        return MAPPER.createObjectNode().put("id", modelId).put("object", "model").put("created", created)
                .put("owned_by", "llb");
    }
}
