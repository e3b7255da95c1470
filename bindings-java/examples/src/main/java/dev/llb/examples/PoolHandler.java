package dev.llb.examples;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import dev.llb.ChatPool;
import dev.llb.LlbException;
import java.io.IOException;

/**
 * {@code GET /pool}: the pool's state as llb reports it ({@link ChatPool#stats()}, the
 * {@code pool_stats} JSON): {@code running} and {@code queued} requests against
 * {@code n_parallel} and {@code max_queue} (past their sum, completions are refused with 503
 * {@code queue_full}), and what each sequence holds. Outside {@code /v1}: not an OpenAI endpoint,
 * but what a load balancer or a test watches.
 */
final class PoolHandler implements HttpHandler {
    private final ChatPool pool;
    private final LlbException refusal;

    /** Reports {@code pool}, or answers with {@code refusal} when the model was refused. */
    PoolHandler(ChatPool pool, LlbException refusal) {
        this.pool = pool;
        this.refusal = refusal;
    }

    @Override
    public void handle(HttpExchange exchange) throws IOException {
        try (exchange) {
            String path = exchange.getRequestURI().getPath();
            if (!path.equals("/pool")) {
                Exchanges.error(exchange, ApiError.invalidRequest(404, "unknown_url", "Unknown request URL: " + path));
            } else if (!exchange.getRequestMethod().equals("GET")) {
                Exchanges.error(exchange, ApiError.invalidRequest(405, "method_not_allowed", "use GET for " + path));
            } else if (refusal != null) {
                Exchanges.error(exchange, ApiError.of(refusal));
            } else {
                Exchanges.json(exchange, 200, pool.stats());
            }
        } catch (IllegalStateException e) {
            Exchanges.error(exchange, new ApiError(503, "server_error", "shutting_down", null, "the server is stopping"));
        }
    }
}
