package dev.llb;

import java.nio.file.Path;
import java.util.Objects;

/**
 * How {@link Llb#pull(String, PullOptions)} picks and fetches a model: which file, which revision,
 * the token, the cache, offline mode, the hub endpoint, and who hears progress or may cancel.
 * Immutable; every {@code with} method returns a copy. Unset fields take llb's defaults
 * (docs/pull.md): the revision {@code main}, the first of Q4_K_M, Q5_K_M, Q4_0, Q8_0, ... present,
 * the token from {@code HF_TOKEN} or the token file, the cache {@code LLB_MODEL_CACHE} or
 * {@code ~/.chatbot_models}, the hub {@code HF_ENDPOINT} or {@code https://huggingface.co}.
 *
 * @param quant a quant tag, e.g. {@code "Q8_0"} (matched case-insensitively as a whole tag), or null
 * @param file an exact GGUF file of the repo (wins over {@code quant}), or null
 * @param revision a branch, tag, {@code refs/pr/N} or 40-hex commit, or null for {@code main}
 * @param token a Hugging Face token ({@code ""}: anonymous), or null for the environment's
 * @param cacheDir the cache root, or null
 * @param offline use the cache only, never the network
 * @param endpoint the hub URL (a mirror, a test's mock hub), or null
 * @param listener receives {@link PullEvent}s on the calling thread, or null
 * @param cancellation cancels the download (the partial file stays resumable), or null
 */
public record PullOptions(String quant, String file, String revision, String token, Path cacheDir, boolean offline,
        String endpoint, PullListener listener, CancellationToken cancellation) {

    /**
     * llb's defaults: nothing set.
     *
     * @return options with every field unset
     */
    public static PullOptions defaults() {
        return new PullOptions(null, null, null, null, null, false, null, null, null);
    }

    /**
     * A copy with {@code quant} set.
     *
     * @param quant a quant tag such as {@code "Q4_K_M"}, or null
     * @return the copy
     */
    public PullOptions withQuant(String quant) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code file} set.
     *
     * @param file an exact {@code .gguf} file of the repo, or null
     * @return the copy
     */
    public PullOptions withFile(String file) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code revision} set.
     *
     * @param revision a branch, tag or commit, or null
     * @return the copy
     */
    public PullOptions withRevision(String revision) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code token} set.
     *
     * @param token a Hugging Face token, {@code ""} for anonymous, or null
     * @return the copy
     */
    public PullOptions withToken(String token) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code cacheDir} set.
     *
     * @param cacheDir the cache root, or null
     * @return the copy
     */
    public PullOptions withCacheDir(Path cacheDir) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code offline} set.
     *
     * @param offline whether to use the cache only
     * @return the copy
     */
    public PullOptions withOffline(boolean offline) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code endpoint} set.
     *
     * @param endpoint the hub URL, e.g. {@code "https://hf-mirror.example"}, or null
     * @return the copy
     */
    public PullOptions withEndpoint(String endpoint) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code listener} set.
     *
     * @param listener receives progress on the calling thread, or null
     * @return the copy
     */
    public PullOptions withListener(PullListener listener) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /**
     * A copy with {@code cancellation} set.
     *
     * @param cancellation cancels the download, or null
     * @return the copy
     */
    public PullOptions withCancellation(CancellationToken cancellation) {
        return new PullOptions(quant, file, revision, token, cacheDir, offline, endpoint, listener, cancellation);
    }

    /** The {@code llb_model_pull} request JSON for {@code repo}. */
    String toJson(String repo) {
        Objects.requireNonNull(repo, "repo");
        var json = Json.MAPPER.createObjectNode().put("repo", repo);
        if (quant != null) {
            json.put("quant", quant);
        }
        if (file != null) {
            json.put("filename", file);
        }
        if (revision != null) {
            json.put("revision", revision);
        }
        if (token != null) {
            json.put("token", token);
        }
        if (cacheDir != null) {
            json.put("cache_dir", cacheDir.toString());
        }
        if (offline) {
            json.put("offline", true);
        }
        if (endpoint != null) {
            json.put("endpoint", endpoint);
        }
        return json.toString();
    }

    /** The token is never shown. */
    @Override
    public String toString() {
        return "PullOptions[quant=" + quant + ", file=" + file + ", revision=" + revision + ", token="
                + (token == null ? null : "***") + ", cacheDir=" + cacheDir + ", offline=" + offline + ", endpoint="
                + endpoint + "]";
    }
}
