package dev.llb;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Path;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * How to open a {@link ChatEngine}: llb's engine config. Unset ({@code null}) values take llb's
 * defaults.
 *
 * @param modelPath the GGUF file ({@code model_path})
 * @param contextSize tokens of context, i.e. the KV cache size ({@code n_ctx}; llb's default 4096)
 * @param threads CPU threads for decoding ({@code n_threads})
 * @param batchSize prompt tokens per decode batch ({@code n_batch}; default 512)
 * @param seed default sampling seed for requests that send none ({@code seed})
 * @param chatTemplateKwargs extra variables for the chat template ({@code chat_template_kwargs})
 */
public record ChatConfig(Path modelPath, Integer contextSize, Integer threads, Integer batchSize, Long seed,
        Map<String, Object> chatTemplateKwargs) {

    /** Copies {@code chatTemplateKwargs} (null means none); {@code modelPath} is required. */
    public ChatConfig {
        Objects.requireNonNull(modelPath, "modelPath");
        chatTemplateKwargs = chatTemplateKwargs == null ? Map.of()
                : Collections.unmodifiableMap(new LinkedHashMap<>(chatTemplateKwargs));
    }

    /**
     * A config with llb's defaults for everything but the model.
     *
     * @param modelPath the GGUF file
     * @return the config
     */
    public static ChatConfig of(Path modelPath) {
        return new ChatConfig(modelPath, null, null, null, null, null);
    }

    /**
     * Sets {@code n_ctx}.
     *
     * @param nCtx the context size in tokens
     * @return a copy with it set
     */
    public ChatConfig withContextSize(int nCtx) {
        return new ChatConfig(modelPath, nCtx, threads, batchSize, seed, chatTemplateKwargs);
    }

    /**
     * Sets {@code n_threads}.
     *
     * @param nThreads decoding threads (default: every core)
     * @return a copy with it set
     */
    public ChatConfig withThreads(int nThreads) {
        return new ChatConfig(modelPath, contextSize, nThreads, batchSize, seed, chatTemplateKwargs);
    }

    /**
     * Sets {@code n_batch}.
     *
     * @param nBatch the prompt batch size
     * @return a copy with it set
     */
    public ChatConfig withBatchSize(int nBatch) {
        return new ChatConfig(modelPath, contextSize, threads, nBatch, seed, chatTemplateKwargs);
    }

    /**
     * Sets {@code seed}.
     *
     * @param defaultSeed the sampling seed of requests that give none
     * @return a copy with it set
     */
    public ChatConfig withSeed(long defaultSeed) {
        return new ChatConfig(modelPath, contextSize, threads, batchSize, defaultSeed, chatTemplateKwargs);
    }

    /**
     * Sets {@code chat_template_kwargs}.
     *
     * @param kwargs extra chat template variables
     * @return a copy with them set
     */
    public ChatConfig withChatTemplateKwargs(Map<String, Object> kwargs) {
        return new ChatConfig(modelPath, contextSize, threads, batchSize, seed, kwargs);
    }

    /** llb's config JSON; unset fields are left out. */
    String toJson() {
        ObjectNode json = Json.MAPPER.createObjectNode();
        json.put("model_path", modelPath.toString());
        putIfSet(json, "n_ctx", contextSize);
        putIfSet(json, "n_threads", threads);
        putIfSet(json, "n_batch", batchSize);
        if (seed != null) {
            json.put("seed", seed);
        }
        if (!chatTemplateKwargs.isEmpty()) {
            json.set("chat_template_kwargs", Json.MAPPER.valueToTree(chatTemplateKwargs));
        }
        try {
            return Json.MAPPER.writeValueAsString(json);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("chatTemplateKwargs cannot be written as JSON", e);
        }
    }

    private static void putIfSet(ObjectNode json, String field, Integer value) {
        if (value != null) {
            json.put(field, value);
        }
    }
}
