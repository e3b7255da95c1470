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

    public ChatConfig {
        Objects.requireNonNull(modelPath, "modelPath");
        chatTemplateKwargs = chatTemplateKwargs == null ? Map.of()
                : Collections.unmodifiableMap(new LinkedHashMap<>(chatTemplateKwargs));
    }

    public static ChatConfig of(Path modelPath) {
        return new ChatConfig(modelPath, null, null, null, null, null);
    }

    public ChatConfig withContextSize(int nCtx) {
        return new ChatConfig(modelPath, nCtx, threads, batchSize, seed, chatTemplateKwargs);
    }

    public ChatConfig withThreads(int nThreads) {
        return new ChatConfig(modelPath, contextSize, nThreads, batchSize, seed, chatTemplateKwargs);
    }

    public ChatConfig withBatchSize(int nBatch) {
        return new ChatConfig(modelPath, contextSize, threads, nBatch, seed, chatTemplateKwargs);
    }

    public ChatConfig withSeed(long defaultSeed) {
        return new ChatConfig(modelPath, contextSize, threads, batchSize, defaultSeed, chatTemplateKwargs);
    }

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
