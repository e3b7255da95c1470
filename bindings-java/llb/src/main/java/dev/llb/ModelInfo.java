package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;

/**
 * What a GGUF's chat template can do, from {@link Llb#modelInfo}: read from the file's header
 * only, no weights loaded.
 *
 * @param path the path as given
 * @param fileSize bytes
 * @param name {@code general.name}, or null
 * @param architecture {@code general.architecture}, e.g. {@code "llama"}
 * @param nParams parameter count
 * @param nCtxTrain training context length
 * @param nVocab vocabulary size
 * @param tokenizerModel {@code tokenizer.ggml.model}, e.g. {@code "gpt2"}
 * @param supportsTools whether llb opens this model ({@code caps.supports_tools && caps.supports_tool_calls})
 * @param caps llama.cpp's caps map ({@code supports_tools}, {@code supports_tool_calls},
 *     {@code supports_parallel_tool_calls}, {@code supports_system_role}, ...)
 * @param capsSource which template the caps come from: {@code tool_use}, {@code default} or {@code chatml_fallback}
 * @param hasToolUseTemplate whether the file has a {@code tool_use} template variant
 * @param chatFormat llama.cpp's chat format for tool calls, e.g. {@code "peg-native"}
 * @param toolParserError why llama.cpp could not build a tool-call parser, or null
 * @param chatTemplate the chat template text, or null
 * @param json the {@code model_info} JSON as llb returned it
 */
public record ModelInfo(String path, long fileSize, String name, String architecture, long nParams, long nCtxTrain,
        long nVocab, String tokenizerModel, boolean supportsTools, Map<String, Boolean> caps, String capsSource,
        boolean hasToolUseTemplate, String chatFormat, String toolParserError, String chatTemplate, String json) {

    /** Copies {@code caps}. */
    public ModelInfo {
        caps = Map.copyOf(caps);
    }

    static ModelInfo parse(String json) {
        JsonNode n = Json.parse(json);
        return new ModelInfo(Json.text(n, "path"), n.path("file_size").asLong(), Json.text(n, "name"),
                Json.text(n, "architecture"), n.path("n_params").asLong(), n.path("n_ctx_train").asLong(),
                n.path("n_vocab").asLong(), Json.text(n, "tokenizer_model"), n.path("supports_tools").asBoolean(),
                Json.booleanMap(n.path("caps")), Json.text(n, "caps_source"),
                n.path("has_tool_use_template").asBoolean(), Json.text(n, "chat_format"),
                Json.text(n, "tool_parser_error"), Json.text(n, "chat_template"), json);
    }

    /**
     * One capability, false when the template does not report it.
     *
     * @param name a caps key, e.g. {@code "supports_parallel_tool_calls"}
     * @return its value
     */
    public boolean cap(String name) {
        return caps.getOrDefault(name, false);
    }

    @Override
    public String toString() {
        return "ModelInfo[" + path + ", architecture=" + architecture + ", supportsTools=" + supportsTools
                + ", chatFormat=" + chatFormat + ", caps=" + caps + "]";
    }
}
