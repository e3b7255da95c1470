package dev.llb.examples;

import com.sun.net.httpserver.HttpExchange;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

/** Reading requests and writing JSON responses with the JDK's HTTP server. */
final class Exchanges {
    static final int MAX_BODY_BYTES = 16 << 20;

    private Exchanges() {}

    static String body(HttpExchange exchange) throws IOException {
        try (InputStream in = exchange.getRequestBody()) {
            byte[] bytes = in.readNBytes(MAX_BODY_BYTES + 1);
            if (bytes.length > MAX_BODY_BYTES) {
                throw ApiError.invalidRequest(413, "request_too_large", "the request body is larger than 16 MiB");
            }
            return new String(bytes, StandardCharsets.UTF_8);
        }
    }

    static void json(HttpExchange exchange, int status, String json) throws IOException {
        byte[] bytes = json.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().set("Content-Type", "application/json");
        exchange.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }

    static void error(HttpExchange exchange, ApiError error) throws IOException {
        if (error.retryAfterSeconds() != null) {
            exchange.getResponseHeaders().set("Retry-After", String.valueOf(error.retryAfterSeconds()));
        }
        json(exchange, error.status, error.json());
    }
}
