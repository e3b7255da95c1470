package dev.llb.examples;

import com.sun.net.httpserver.HttpServer;
import dev.llb.ChatConfig;
import dev.llb.ChatPool;
import dev.llb.Llb;
import dev.llb.LlbException;
import dev.llb.ModelInfo;
import dev.llb.PromptCache;
import dev.llb.Speculative;
import dev.llb.ToolsUnsupportedException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * A minimal OpenAI-compatible server over llb, on the JDK's built-in HTTP server:
 * {@code GET /v1/models}, {@code POST /v1/chat/completions} (JSON, or Server-Sent Events with
 * {@code "stream":true}), errors as OpenAI error objects; and {@code GET /pool}, llb's
 * {@code pool_stats} (running and waiting requests, {@link PoolHandler}).
 *
 * <pre>run-example-server --model PATH --port PORT [--host 127.0.0.1] [--parallel 4] [--queue N] [--threads N]
 *     [--adaptive-threads true|false] [--thread-poll 0-100] [--ctx N] [--reasoning-budget N]
 *     [--prompt-cache-dir DIR] [--prompt-cache-ram-bytes N] [--prompt-cache-disk-bytes N]
 *     [--speculative-type TYPE] [--draft-max N] [--draft-min N] [--draft-model PATH] [--draft-n-gpu-layers N]</pre>
 *
 * <p>{@code --port 0} picks a free port; the first line on stdout says which. Every request runs
 * on one llb pool ({@link ChatPool}): up to {@code --parallel} decode at once in one batched
 * context, sharing prompt prefixes; up to {@code --queue} more wait (llb's default: 16 per
 * parallel request), and past that a request is refused at once: 503 with a {@code Retry-After}
 * header and an OpenAI error whose {@code code} is {@code queue_full}, before its body is read
 * when llb's counts already show the pool full ({@link ChatPool#throwIfFull()}). {@code --ctx} is the
 * KV budget all requests share (llb's default: 4096 tokens per parallel request);
 * {@code --threads} defaults to llb's process-wide budget (the machine's cores) and is the ceiling
 * of the decode threads; {@code --adaptive-threads} and {@code --thread-poll} are llb's
 * {@code adaptive_threads} (default true) and {@code thread_poll} (default 0);
 * {@code --reasoning-budget} is llb's default {@code reasoning_budget} (tokens; -1 unlimited, 0 no
 * thinking), which a request's own field overrides. The {@code --prompt-cache-*} flags are llb's
 * {@code prompt_cache} ({@link PromptCache}): {@code --prompt-cache-dir} keeps conversations that
 * leave the context in a directory, written through and when the server stops, so a restarted
 * server restores their prompts instead of reading them (none by default);
 * {@code --prompt-cache-ram-bytes} is the RAM tier's budget (default sized from the model, 0 none);
 * {@code --prompt-cache-disk-bytes} the directory's (default 16 GiB).
 * The {@code --speculative-type} and {@code --draft-*} flags are llb's {@code speculative}
 * ({@link Speculative}): {@code --speculative-type} the drafter by llama.cpp's name
 * ({@code none} turns speculation off unless a request sends {@code "speculative": true}),
 * {@code --draft-max} and {@code --draft-min} the draft sizes (1 to 256; 0 to draft-max),
 * {@code --draft-model} and {@code --draft-n-gpu-layers} the draft model of the {@code draft-*}
 * types; unset, llb picks the type and the sizes. A request's {@code "speculative"} overrides them.
 * {@code /v1/models} reports the model's {@code supports_tools} and {@code caps} ({@link Llb#modelInfo}).
 * A model that llb refuses for lack of tool calling still starts the server, which then answers
 * every completion with llb's refusal (422, code {@code tools_unsupported}); other load failures
 * (missing file, not a GGUF, ...) stop it with exit status 1.
 */
public final class OpenAiServer {
    private static final String USAGE =
            "usage: run-example-server --model PATH --port PORT [--host 127.0.0.1] [--parallel 4] [--queue N] [--threads N]"
                    + " [--adaptive-threads true|false] [--thread-poll 0-100] [--ctx N] [--reasoning-budget N]"
                    + " [--prompt-cache-dir DIR] [--prompt-cache-ram-bytes N] [--prompt-cache-disk-bytes N]"
                    + " [--speculative-type TYPE] [--draft-max N] [--draft-min N] [--draft-model PATH] [--draft-n-gpu-layers N]";

    private OpenAiServer() {}

    record Options(Path model, String host, int port, int parallel, Integer queue, Integer threads,
            Boolean adaptiveThreads, Integer threadPoll, Integer contextSize, Integer reasoningBudget,
            PromptCache promptCache, Speculative speculative) {
        /** llb's engine config of these options; unset (null) values take llb's defaults. */
        ChatConfig config() {
            ChatConfig config = new ChatConfig(model, contextSize, threads, null, null, null);
            if (adaptiveThreads != null) {
                config = config.withAdaptiveThreads(adaptiveThreads);
            }
            if (threadPoll != null) {
                config = config.withThreadPoll(threadPoll);
            }
            if (reasoningBudget != null) {
                config = config.withReasoningBudget(reasoningBudget);
            }
            if (promptCache != null) {
                config = config.withPromptCache(promptCache);
            }
            return speculative == null ? config : config.withSpeculative(speculative);
        }

        static Options parse(String[] args) {
            Path model = null;
            String host = "127.0.0.1";
            Integer port = null;
            int parallel = 4;
            Integer queue = null;
            Integer threads = null;
            Boolean adaptiveThreads = null;
            Integer threadPoll = null;
            Integer contextSize = null;
            Integer reasoningBudget = null;
            PromptCache promptCache = null; // null: no --prompt-cache-* flag, llb's defaults
            Speculative speculative = null; // null: no --speculative-type or --draft-* flag, llb's defaults
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
                    // --engines: the name before pools (one engine per request); same meaning.
                    case "--parallel", "--engines" -> parallel = Integer.parseInt(value);
                    case "--queue" -> queue = Integer.parseInt(value);
                    case "--threads" -> threads = Integer.parseInt(value);
                    case "--adaptive-threads" -> adaptiveThreads = switch (value) {
                        case "true" -> true;
                        case "false" -> false;
                        default -> throw new IllegalArgumentException("--adaptive-threads takes true or false");
                    };
                    case "--thread-poll" -> threadPoll = Integer.parseInt(value);
                    case "--ctx" -> contextSize = Integer.parseInt(value);
                    case "--reasoning-budget" -> reasoningBudget = Integer.parseInt(value);
                    case "--prompt-cache-dir", "--prompt-cache-ram-bytes", "--prompt-cache-disk-bytes" ->
                        promptCache = promptCache(promptCache == null ? PromptCache.DEFAULT : promptCache, flag, value);
                    case "--speculative-type", "--draft-max", "--draft-min", "--draft-model", "--draft-n-gpu-layers" ->
                        speculative = speculative(speculative == null ? Speculative.DEFAULT : speculative, flag, value);
                    default -> throw new IllegalArgumentException("unknown option " + flag);
                }
            }
            if (model == null || port == null) {
                throw new IllegalArgumentException("--model and --port are required");
            }
            if (parallel < 1) {
                throw new IllegalArgumentException("--parallel must be at least 1");
            }
            return new Options(model, host, port, parallel, queue, threads, adaptiveThreads, threadPoll, contextSize,
                    reasoningBudget, promptCache, speculative);
        }

        /** A {@code --prompt-cache-*} flag over the settings of the flags before it. */
        private static PromptCache promptCache(PromptCache cache, String flag, String value) {
            return switch (flag) {
                case "--prompt-cache-dir" -> cache.withDir(Path.of(value));
                case "--prompt-cache-ram-bytes" -> cache.withRamBytes(Long.parseLong(value));
                case "--prompt-cache-disk-bytes" -> cache.withDiskBytes(Long.parseLong(value));
                default -> throw new IllegalArgumentException("unknown option " + flag);
            };
        }

        /**
         * A {@code --speculative-type} or {@code --draft-*} flag over the settings of the flags
         * before it; a value llb would refuse is refused here, naming the flag.
         */
        private static Speculative speculative(Speculative s, String flag, String value) {
            try {
                return switch (flag) {
                    case "--speculative-type" -> s.withType(value);
                    case "--draft-max" -> s.withDraftMax(Integer.parseInt(value));
                    case "--draft-min" -> s.withDraftMin(Integer.parseInt(value));
                    case "--draft-model" -> s.withDraftModel(Path.of(value));
                    case "--draft-n-gpu-layers" -> s.withDraftGpuLayers(Integer.parseInt(value));
                    default -> throw new IllegalArgumentException("unknown option " + flag);
                };
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(flag + " " + value + ": " + e.getMessage(), e);
            }
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
        ChatConfig config = options.config();

        // The header's capabilities, for /v1/models (llb_model_info reads no weights).
        ModelInfo info = null;
        try {
            info = Llb.modelInfo(options.model());
        } catch (LlbException e) {
            // Opening the pool reports the same failure in its own words below.
        }
        ChatPool pool = null;
        ToolsUnsupportedException refusal = null;
        try {
            pool = ChatPool.open(config, options.parallel(), options.queue());
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
        // One thread per connection: a request blocks its thread while the pool runs or queues it.
        ExecutorService workers = Executors.newVirtualThreadPerTaskExecutor();
        server.setExecutor(workers);
        server.createContext("/v1/models", new ModelsHandler(modelId, pool != null, info, refusal == null ? null : refusal.caps()));
        server.createContext("/v1/chat/completions", new ChatCompletionsHandler(pool, refusal));
        server.createContext("/pool", new PoolHandler(pool, refusal));
        server.createContext("/", exchange -> {
            try (exchange) {
                Exchanges.error(exchange, ApiError.invalidRequest(404, "unknown_url",
                        "Unknown request URL: " + exchange.getRequestMethod() + " " + exchange.getRequestURI()));
            }
        });
        server.start();

        ChatPool served = pool;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.stop(0);
            workers.shutdownNow();
            if (served != null) {
                served.close(); // cancels running completions and waits for them
            }
        }, "llb-server-shutdown"));
        System.out.printf("llb example server listening on http://%s:%d/v1 (model %s, %d parallel)%n",
                options.host(), server.getAddress().getPort(), modelId, options.parallel());
        System.out.flush();
    }
}
