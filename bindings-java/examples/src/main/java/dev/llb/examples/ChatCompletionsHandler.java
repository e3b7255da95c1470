package dev.llb.examples;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import dev.llb.ChatEngine;
import dev.llb.LlbException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.concurrent.TimeUnit;

/**
 * {@code POST /v1/chat/completions}: the request body goes to llb as it is (llb validates it and
 * names any field it rejects); {@code "stream":true} answers with Server-Sent Events.
 */
final class ChatCompletionsHandler implements HttpHandler {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final long ENGINE_WAIT_SECONDS = 300;

    private final EnginePool engines;
    private final LlbException refusal;

    /** Serves {@code engines}, or answers every request with {@code refusal} when the model was refused. */
    ChatCompletionsHandler(EnginePool engines, LlbException refusal) {
        this.engines = engines;
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
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            Exchanges.error(exchange, new ApiError(503, "server_error", "shutting_down", null, "the server is stopping"));
        } finally {
            exchange.close();
        }
    }

    private void serve(HttpExchange exchange) throws IOException, InterruptedException {
        if (!exchange.getRequestURI().getPath().equals("/v1/chat/completions")) {
            throw ApiError.invalidRequest(404, "unknown_url", "Unknown request URL: " + exchange.getRequestURI());
        }
        if (!exchange.getRequestMethod().equals("POST")) {
            throw ApiError.invalidRequest(405, "method_not_allowed", "use POST for " + exchange.getRequestURI());
        }
        if (refusal != null) {
            throw ApiError.of(refusal);
        }
        String body = Exchanges.body(exchange);
        ChatEngine engine = engines.acquire(ENGINE_WAIT_SECONDS, TimeUnit.SECONDS);
        try {
            if (wantsStream(body)) {
                stream(exchange, engine, body);
            } else {
                Exchanges.json(exchange, 200, engine.infer(body));
            }
        } finally {
            engines.release(engine);
        }
    }

    private static void stream(HttpExchange exchange, ChatEngine engine, String body) {
        EventStream events = new EventStream(exchange);
        try {
            engine.stream(body, events::send);
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
