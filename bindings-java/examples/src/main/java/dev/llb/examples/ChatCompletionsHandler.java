package dev.llb.examples;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import dev.llb.ChatPool;
import dev.llb.LlbException;
import java.io.IOException;
import java.io.UncheckedIOException;

/**
 * {@code POST /v1/chat/completions}: the request body goes to llb as it is (llb validates it and
 * names any field it rejects); {@code "stream":true} answers with Server-Sent Events.
 */
final class ChatCompletionsHandler implements HttpHandler {
    private static final ObjectMapper MAPPER = new ObjectMapper();

    private final ChatPool pool;
    private final LlbException refusal;

    /** Serves {@code pool}, or answers every request with {@code refusal} when the model was refused. */
    ChatCompletionsHandler(ChatPool pool, LlbException refusal) {
        this.pool = pool;
        this.refusal = refusal;
    }

    @Override
    public void handle(HttpExchange exchange) throws IOException {
        try {
            serve(exchange);
        } catch (ApiError e) {
            Exchanges.error(exchange, e);
        } catch (LlbException e) {
            Exchanges.error(exchange, ApiError.of(e));
        } catch (IllegalStateException e) {
            Exchanges.error(exchange, new ApiError(503, "server_error", "shutting_down", null, "the server is stopping"));
        } finally {
            exchange.close();
        }
    }

    private void serve(HttpExchange exchange) throws IOException {
        if (!exchange.getRequestURI().getPath().equals("/v1/chat/completions")) {
            throw ApiError.invalidRequest(404, "unknown_url", "Unknown request URL: " + exchange.getRequestURI());
        }
        if (!exchange.getRequestMethod().equals("POST")) {
            throw ApiError.invalidRequest(405, "method_not_allowed", "use POST for " + exchange.getRequestURI());
        }
        if (refusal != null) {
            throw ApiError.of(refusal);
        }
        // A full pool refuses before the body is read or parsed: under a burst, a refusal is the
        // cheapest request the server answers (llb still has the last word on admission).
        pool.throwIfFull();
        String body = Exchanges.body(exchange);
        // The pool runs this request beside the others (or queues it; past its queue: queue_full).
        if (wantsStream(body)) {
            stream(exchange, pool, body);
        } else {
            Exchanges.json(exchange, 200, pool.infer(body));
        }
    }

    private static void stream(HttpExchange exchange, ChatPool pool, String body) {
        EventStream events = new EventStream(exchange);
        try {
            pool.stream(body, events::send);
            events.done();
        } catch (LlbException e) {
            if (!events.started()) {
                throw e; // nothing sent yet: a plain error response with its status
            }
            events.send(ApiError.of(e).json());
        } catch (UncheckedIOException e) {
            // The client went away: the exception cancelled the generation; nothing left to send.
        }
    }

    /** {@code "stream":true}. Anything unreadable goes to llb unstreamed, which reports it. */
    private static boolean wantsStream(String body) {
        try {
            JsonNode stream = MAPPER.readTree(body).path("stream");
            return stream.isBoolean() && stream.booleanValue();
        } catch (JsonProcessingException e) {
            return false;
        }
    }
}
