package dev.llb.examples;

import com.sun.net.httpserver.HttpExchange;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/**
 * A Server-Sent Events response: {@code data: <json>} per event, then {@code data: [DONE]}.
 * Headers go out with the first event, so an error before any chunk can still be a plain
 * JSON error response with its status code.
 */
final class EventStream {
    private final HttpExchange exchange;
    private OutputStream out;

    EventStream(HttpExchange exchange) {
        this.exchange = exchange;
    }

    boolean started() {
        return out != null;
    }

    /** Sends one event; a client that went away surfaces as {@link UncheckedIOException}. */
    void send(String data) {
        try {
            if (out == null) {
                exchange.getResponseHeaders().set("Content-Type", "text/event-stream");
                exchange.getResponseHeaders().set("Cache-Control", "no-cache");
                exchange.sendResponseHeaders(200, 0);
                out = exchange.getResponseBody();
            }
            out.write(("data: " + data + "\n\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    void done() {
        send("[DONE]");
    }
}
