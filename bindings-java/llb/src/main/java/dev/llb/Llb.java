package dev.llb;

import java.nio.file.Path;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * Entry point of llb's Java binding: library-wide queries. Chat goes through {@link ChatEngine}.
 *
 * <p>The native library is loaded on first use: from {@code -Dllb.library.path}, then
 * {@code java.library.path}, then the jar's bundled copy. Run with
 * {@code --enable-native-access=dev.llb} (module path) or {@code --enable-native-access=ALL-UNNAMED}
 * (class path) to allow it without a warning.
 * Every method here may be called from any thread.
 */
public final class Llb {
    private Llb() {}

    /**
     * The loaded library's version and the llama.cpp it was built with.
     *
     * @return the parsed {@code llb_version} JSON
     */
    public static VersionInfo version() {
        return VersionInfo.parse(Json.orThrow(Native.version()));
    }

    /**
     * The devices of the library's compiled-in ggml backends (the CPU; GPUs in a CUDA, Vulkan or
     * Metal build; RPC servers), as {@code llb_devices} JSON:
     * {@code {"type":"devices","devices":[{"name":"CPU","description":...,"type":"cpu"|"gpu"|"igpu"|"accel",
     * "memory_free":bytes,"memory_total":bytes}]}}. The names are what the config's {@code devices} takes.
     *
     * @return the {@code devices} JSON
     * @throws UnsatisfiedLinkError when the loaded library predates {@code llb_devices}
     */
    public static String devices() {
        return Json.orThrow(Native.devices());
    }

    /**
     * Reads a GGUF's header (not its weights) and reports what its chat template can do.
     *
     * @param gguf the model file
     * @return the parsed {@code model_info} JSON
     * @throws LlbException {@code file_not_found}, {@code io_error}, {@code not_a_gguf},
     *     {@code template_error}, {@code invalid_argument}
     */
    public static ModelInfo modelInfo(Path gguf) {
        Objects.requireNonNull(gguf, "gguf");
        return ModelInfo.parse(Json.orThrow(Native.modelInfo(gguf.toString())));
    }

    /**
     * Pulls a GGUF from the Hugging Face hub (as {@code llb_model_pull}): picks the file, downloads
     * it sha256-verified and resumable into the model cache, and checks it with the same tool gate
     * as {@link ChatEngine#open}. {@code requestJson}:
     * {@code {"repo":"org/name","revision":"main","quant":"Q4_K_M","filename":null,"cache_dir":null,
     * "token":null,"offline":false}}.
     *
     * <p>{@code onEvent} (may be null) receives {@code pull_resolved}, {@code pull_progress} and
     * {@code pull_warning} events as JSON, on the calling thread. Cancelling {@code token} (may be
     * null) stops the download; the partial file stays resumable. Blocks for the whole download;
     * may be called from any thread.
     *
     * @param requestJson the pull request
     * @param onEvent receives progress events, or null
     * @param token cancels the download, or null
     * @return the {@code pull_result} JSON ({@code path} is the file to open)
     * @throws ToolsUnsupportedException when the downloaded model cannot do tool calling (it is
     *     quarantined in the cache)
     * @throws PullException {@code auth_required}, {@code repo_not_found}, {@code quant_not_found},
     *     {@code checksum_mismatch}, {@code network}, {@code cancelled}, ... (docs/pull.md)
     */
    public static String pull(String requestJson, Consumer<String> onEvent, CancellationToken token) {
        Objects.requireNonNull(requestJson, "requestJson");
        return NativeThreads.call(onEvent, token, (events, cancel) -> pullJson(requestJson, events, cancel));
    }

    private static String pullJson(String requestJson, Consumer<String> onEvent, CancellationToken token) {
        PullEvents events = new PullEvents(onEvent, token);
        String result = Native.modelPull(requestJson, events);
        Throwable failed = events.failure();
        if (failed != null) {
            Native.throwIfUnchecked(failed);
            throw new LlbException("cancelled", "the pull event consumer failed: " + failed);
        }
        if (Json.isError(result)) {
            throw PullException.fromJson(Json.parse(result), result);
        }
        return result;
    }

    /**
     * {@code pull(repo, PullOptions.defaults())}.
     *
     * @param repo {@code org/name}, optionally {@code org/name:QUANT}
     * @return the local GGUF file to open (the first shard of a split model)
     */
    public static Path pull(String repo) {
        return pull(repo, PullOptions.defaults());
    }

    /**
     * Pulls a GGUF from the Hugging Face hub and returns the local file to open: picks the file
     * ({@link PullOptions#file()}, else {@link PullOptions#quant()}, else llb's default quants),
     * downloads it sha256-verified and resumable into the cache, and checks it with the same tool
     * gate as {@link ChatEngine#open}. A model already in the cache is not downloaded again.
     *
     * <p>The options' listener hears {@link PullEvent}s on the calling thread; cancelling their
     * token stops the download (the partial file stays resumable). Blocks for the whole download;
     * from a virtual thread it waits without pinning a carrier, and interrupting it cancels the
     * pull ({@link PullException.Reason#CANCELLED}, interrupt status kept).
     *
     * @param repo {@code org/name}, optionally {@code org/name:QUANT}
     * @param options file choice, revision, token, cache, offline, endpoint, listener, cancellation
     * @return the local GGUF file to open (the first shard of a split model)
     * @throws ToolsUnsupportedException when the downloaded model cannot do tool calling (it is
     *     quarantined: {@link ToolsUnsupportedException#quarantined()})
     * @throws PullException with llb's code and its typed {@link PullException#reason()}
     * @throws NullPointerException when {@code repo} or {@code options} is null
     */
    public static Path pull(String repo, PullOptions options) {
        Objects.requireNonNull(repo, "repo");
        Objects.requireNonNull(options, "options");
        String request = options.toJson(repo);
        PullListener listener = options.listener();
        Consumer<String> onEvent = listener == null ? null : json -> {
            PullEvent event = PullEvents.typed(json);
            if (event != null) {
                listener.onEvent(event);
            }
        };
        String result = pull(request, onEvent, options.cancellation());
        return Path.of(Json.parse(result).path("path").asText());
    }
}
