package dev.llb.examples;

import com.sun.net.httpserver.HttpServer;
import dev.llb.ChatConfig;
import dev.llb.LlbException;
import dev.llb.ToolsUnsupportedException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * A minimal OpenAI-compatible server over llb, on the JDK's built-in HTTP server:
 * {@code GET /v1/models}, {@code POST /v1/chat/completions} (JSON, or Server-Sent Events with
 * {@code "stream":true}), errors as OpenAI error objects.
 *
 * <pre>run-example-server --model PATH --port PORT [--host 127.0.0.1] [--engines 1] [--threads N] [--ctx 4096]</pre>
 *
 * <p>{@code --port 0} picks a free port; the first line on stdout says which. Requests run in
 * parallel up to {@code --engines} (one llb engine each, sharing the weights); more wait.
 * A model that llb refuses for lack of tool calling still starts the server, which then answers
 * every completion with llb's refusal (422, code {@code tools_unsupported}); other load failures
 * (missing file, not a GGUF, ...) stop it with exit status 1.
 */
public final class OpenAiServer {
    private static final String USAGE =
            "usage: run-example-server --model PATH --port PORT [--host 127.0.0.1] [--engines 1] [--threads N] [--ctx 4096]";

    private OpenAiServer() {}

    record Options(Path model, String host, int port, int engines, int threads, int contextSize) {
        static Options parse(String[] args) {
            Path model = null;
            String host = "127.0.0.1";
            Integer port = null;
            int engines = 1;
            Integer threads = null;
            int contextSize = 4096;
            for (int i = 0; i < args.length; i++) {
                String flag = args[i];
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException(flag + " needs a value");
                }
                String value = args[++i];
                switch (flag) {
                    case "--model" -> model = Path.of(value);
                    case "--host" -> host = value;
                    case "--port" -> port = Integer.parseInt(value);
                    case "--engines" -> engines = Integer.parseInt(value);
                    case "--threads" -> threads = Integer.parseInt(value);
                    case "--ctx" -> contextSize = Integer.parseInt(value);
                    default -> throw new IllegalArgumentException("unknown option " + flag);
                }
            }
            if (model == null || port == null) {
                throw new IllegalArgumentException("--model and --port are required");
            }
            if (engines < 1) {
                throw new IllegalArgumentException("--engines must be at least 1");
            }
            // Decoding threads spin-wait: more threads than cores slows everything down.
            int perEngine = threads != null ? threads : Math.max(1, Runtime.getRuntime().availableProcessors() / engines);
            return new Options(model, host, port, engines, perEngine, contextSize);
        }
    }

    public static void main(String[] args) throws IOException {
        Options options;
        try {
            options = Options.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage() + "\n" + USAGE);
            System.exit(2);
            return;
        }
        String modelId = options.model().getFileName().toString();
        ChatConfig config = ChatConfig.of(options.model()).withContextSize(options.contextSize()).withThreads(options.threads());

        EnginePool engines = null;
        LlbException refusal = null;
        try {
            engines = new EnginePool(config, options.engines());
        } catch (ToolsUnsupportedException e) {
            refusal = e;
            System.err.println("llb refused " + options.model() + ": " + e.getMessage() + " caps=" + e.caps()
                    + "\nServing the refusal: every chat completion gets HTTP 422 (tools_unsupported).");
        } catch (LlbException e) {
            System.err.println("cannot open " + options.model() + ": " + e.getMessage() + " (" + e.code() + ")");
            System.exit(1);
            return;
        }

        HttpServer server = HttpServer.create(new InetSocketAddress(options.host(), options.port()), 64);
        ExecutorService workers = Executors.newFixedThreadPool(options.engines() + 4);
        server.setExecutor(workers);
        server.createContext("/v1/models", new ModelsHandler(modelId, engines != null));
        server.createContext("/v1/chat/completions", new ChatCompletionsHandler(engines, refusal));
        server.createContext("/", exchange -> {
            try (exchange) {
                Exchanges.error(exchange, ApiError.invalidRequest(404, "unknown_url",
                        "Unknown request URL: " + exchange.getRequestMethod() + " " + exchange.getRequestURI()));
            }
        });
        server.start();

        EnginePool pool = engines;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.stop(0);
            workers.shutdownNow();
            if (pool != null) {
                pool.close(); // cancels running completions and waits for them
            }
        }, "llb-server-shutdown"));
        System.out.printf("llb example server listening on http://%s:%d/v1 (model %s, %d engine(s) x %d thread(s))%n",
                options.host(), server.getAddress().getPort(), modelId, options.engines(), options.threads());
        System.out.flush();
    }
}
