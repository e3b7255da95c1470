package dev.llb.springai;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.llb.LlbException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Consumer;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.Message;
import org.springframework.ai.chat.messages.SystemMessage;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.metadata.ChatGenerationMetadata;
import org.springframework.ai.chat.metadata.ChatResponseMetadata;
import org.springframework.ai.chat.metadata.DefaultUsage;
import org.springframework.ai.chat.metadata.Usage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.model.Generation;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.retry.TransientAiException;
import org.springframework.ai.tool.definition.ToolDefinition;

/** Spring AI's prompts to llb's OpenAI request JSON, llb's completions and chunks back, llb's errors to Spring AI's. */
final class Mapping {
    static final ObjectMapper MAPPER = new ObjectMapper();
    /** The assistant message property with the reasoning text, as Spring AI's OpenAI model names it. */
    static final String REASONING_CONTENT = "reasoningContent";
    /** In a streamed response: this chunk's part of the reasoning ({@link #REASONING_CONTENT} holds all so far). */
    static final String REASONING_DELTA = "reasoningDelta";

    private Mapping() {}

    static String request(List<Message> messages, LlbChatOptions o, List<ToolDefinition> tools) {
        ObjectNode body = MAPPER.createObjectNode();
        ArrayNode array = body.putArray("messages");
        for (Message m : messages) {
            message(m, array);
        }
        putIfSet(body, "temperature", o.getTemperature());
        putIfSet(body, "top_p", o.getTopP());
        if (o.getTopK() != null) {
            body.put("top_k", o.getTopK());
        }
        putIfSet(body, "frequency_penalty", o.getFrequencyPenalty());
        putIfSet(body, "presence_penalty", o.getPresencePenalty());
        if (o.getMaxTokens() != null) {
            body.put("max_tokens", o.getMaxTokens());
        }
        if (o.getStopSequences() != null && !o.getStopSequences().isEmpty()) {
            ArrayNode stop = body.putArray("stop");
            o.getStopSequences().forEach(stop::add);
        }
        llbFields(body, o);
        if (o.getOutputSchema() != null && !o.getOutputSchema().isBlank()) {
            body.set("response_format", responseFormat(o.getOutputSchema()));
        }
        boolean afterTools = !messages.isEmpty() && messages.get(messages.size() - 1) instanceof ToolResponseMessage;
        String choice = afterTools && o.getToolChoiceAfterTools() != null ? o.getToolChoiceAfterTools() : o.getToolChoice();
        if (!tools.isEmpty()) {
            ArrayNode array2 = body.putArray("tools");
            for (ToolDefinition t : tools) {
                ObjectNode function = array2.addObject().put("type", "function").putObject("function").put("name", t.name());
                if (t.description() != null && !t.description().isEmpty()) {
                    function.put("description", t.description());
                }
                function.set("parameters", parse(t.inputSchema(), "the input schema of tool " + t.name()));
            }
            if (choice != null) {
                body.set("tool_choice", toolChoice(choice));
            }
            if (o.getParallelToolCalls() != null) {
                body.put("parallel_tool_calls", o.getParallelToolCalls());
            }
        } else if (choice != null && !choice.equals("auto") && !choice.equals("none")) {
            throw new IllegalArgumentException("toolChoice \"" + choice + "\" needs at least one tool callback");
        }
        if (o.getExtraBody() != null) {
            o.getExtraBody().forEach((k, v) -> body.set(k, MAPPER.valueToTree(v)));
        }
        return body.toString();
    }

    /** The fields of llb's (and OpenAI's) request that Spring AI's portable options lack. */
    private static void llbFields(ObjectNode body, LlbChatOptions o) {
        if (o.getSeed() != null) {
            body.put("seed", o.getSeed());
        }
        if (o.getReasoningEffort() != null) {
            body.put("reasoning_effort", o.getReasoningEffort());
        }
        if (o.getReasoningBudget() != null) {
            body.put("reasoning_budget", o.getReasoningBudget());
        }
        if (o.getSpeculative() != null) {
            body.put("speculative", o.getSpeculative());
        }
    }

    /**
     * Keywords llb's grammars do not enforce in any format (docs/tool-calls.md, "Keywords per
     * format"): a schema holding one is refused rather than sent with the keyword silently ignored.
     */
    static final Set<String> UNENFORCED = Set.of("uniqueItems", "multipleOf", "minProperties", "maxProperties",
            "propertyNames", "patternProperties", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
            "dependencies", "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems");
    /** The {@code format}s llb's JSON grammars enforce; others are refused for the same reason. */
    static final Set<String> FORMATS = Set.of("date", "time", "date-time", "uuid");
    /**
     * OpenAPI's numeric formats, which Spring AI's schema generator writes for Java's number
     * types: {@code int32} becomes the range llb enforces (minimum and maximum of a Java int);
     * {@code int64}, {@code float} and {@code double} are dropped, because every number llb's
     * grammar admits (at most 15 digits) fits them.
     */
    static final Set<String> NUMERIC_FORMATS = Set.of("int32", "int64", "float", "double");

    /**
     * The output schema as llb's {@code response_format}:
     * {@code {"type":"json_schema","json_schema":{"name":"response","schema":...,"strict":true}}}.
     *
     * @throws NonTransientAiException when the schema is not a JSON object, or holds a keyword llb
     *     does not enforce (named with its place)
     */
    static ObjectNode responseFormat(String outputSchema) {
        JsonNode schema;
        try {
            schema = MAPPER.readTree(outputSchema);
        } catch (JsonProcessingException e) {
            throw new NonTransientAiException("the output schema is not JSON: " + e.getOriginalMessage(), e);
        }
        if (schema == null || !schema.isObject()) {
            throw new NonTransientAiException("the output schema must be a JSON Schema object, not " + outputSchema);
        }
        schema = schema.deepCopy();
        checkEnforceable(schema, "$");
        ObjectNode format = MAPPER.createObjectNode().put("type", "json_schema");
        format.putObject("json_schema").put("name", "response").put("strict", true).set("schema", schema);
        return format;
    }

    /**
     * Walks the schema's subschemas (not property names) for keywords llb would not enforce, and
     * turns the numeric formats into what llb enforces ({@link #NUMERIC_FORMATS}).
     */
    private static void checkEnforceable(JsonNode schema, String at) {
        if (!schema.isObject()) {
            return;
        }
        for (Map.Entry<String, JsonNode> e : schema.properties()) {
            String key = e.getKey();
            JsonNode value = e.getValue();
            String here = at + "." + key;
            if (UNENFORCED.contains(key)) {
                throw unenforceable("`" + key + "` at " + here);
            }
            switch (key) {
                case "format" -> {
                    if (value.isTextual() && !FORMATS.contains(value.asText()) && !NUMERIC_FORMATS.contains(value.asText())) {
                        throw unenforceable("`format: " + value.asText() + "` at " + here + " (llb enforces " + FORMATS + ")");
                    }
                }
                case "properties", "$defs", "definitions" -> value.properties()
                        .forEach(p -> checkEnforceable(p.getValue(), here + "." + p.getKey()));
                case "items", "additionalProperties", "prefixItems", "anyOf", "oneOf", "allOf" -> {
                    if (value.isArray()) {
                        for (int i = 0; i < value.size(); i++) {
                            checkEnforceable(value.get(i), here + "[" + i + "]");
                        }
                    } else {
                        checkEnforceable(value, here);
                    }
                }
                default -> { }
            }
        }
        if (schema.get("format") instanceof JsonNode f && NUMERIC_FORMATS.contains(f.asText())) {
            ObjectNode node = (ObjectNode) schema;
            node.remove("format");
            if (f.asText().equals("int32")) {
                if (!node.has("minimum") && !node.has("exclusiveMinimum")) {
                    node.put("minimum", Integer.MIN_VALUE);
                }
                if (!node.has("maximum") && !node.has("exclusiveMaximum")) {
                    node.put("maximum", Integer.MAX_VALUE);
                }
            }
        }
    }

    private static NonTransientAiException unenforceable(String what) {
        return new NonTransientAiException("llb cannot enforce " + what + " of the output schema: its grammar would"
                + " ignore it, so the reply could break it. Remove the keyword, or validate the entity yourself"
                + " (docs/tool-calls.md lists what llb enforces)");
    }

    private static void putIfSet(ObjectNode body, String field, Double value) {
        if (value != null) {
            body.put(field, value);
        }
    }

    /** {@code auto}, {@code none}, {@code required}; a JSON object as it is; anything else names the tool to call. */
    static JsonNode toolChoice(String choice) {
        String c = choice.trim();
        if (c.equals("auto") || c.equals("none") || c.equals("required")) {
            return MAPPER.getNodeFactory().textNode(c);
        }
        if (c.startsWith("{")) {
            return parse(c, "toolChoice");
        }
        ObjectNode named = MAPPER.createObjectNode().put("type", "function");
        named.putObject("function").put("name", c);
        return named;
    }

    private static JsonNode parse(String json, String what) {
        try {
            return MAPPER.readTree(json);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException(what + " is not JSON: " + e.getOriginalMessage(), e);
        }
    }

    private static void message(Message message, ArrayNode out) {
        switch (message) {
            case SystemMessage m -> out.addObject().put("role", "system").put("content", m.getText());
            case UserMessage m -> {
                if (!m.getMedia().isEmpty()) {
                    throw new IllegalArgumentException("llb runs text models: a user message's media cannot be sent");
                }
                out.addObject().put("role", "user").put("content", m.getText());
            }
            case AssistantMessage m -> {
                ObjectNode node = out.addObject().put("role", "assistant");
                if (m.getText() != null && !m.getText().isEmpty()) {
                    node.put("content", m.getText());
                } else {
                    node.putNull("content");
                }
                if (m.getMetadata().get(REASONING_CONTENT) instanceof String reasoning && !reasoning.isEmpty()) {
                    node.put("reasoning_content", reasoning);
                }
                if (m.hasToolCalls()) {
                    ArrayNode calls = node.putArray("tool_calls");
                    for (AssistantMessage.ToolCall call : m.getToolCalls()) {
                        ObjectNode c = calls.addObject();
                        if (call.id() != null) {
                            c.put("id", call.id());
                        }
                        c.put("type", "function");
                        c.putObject("function").put("name", call.name())
                                .put("arguments", call.arguments() == null || call.arguments().isEmpty() ? "{}" : call.arguments());
                    }
                }
            }
            case ToolResponseMessage m -> {
                for (ToolResponseMessage.ToolResponse r : m.getResponses()) {
                    ObjectNode node = out.addObject().put("role", "tool").put("content", r.responseData());
                    if (r.id() != null) {
                        node.put("tool_call_id", r.id());
                    }
                    if (r.name() != null) {
                        node.put("name", r.name());
                    }
                }
            }
            default -> throw new IllegalArgumentException("llb cannot send a " + message.getMessageType() + " message");
        }
    }

    static JsonNode parseCompletion(String json) {
        try {
            return MAPPER.readTree(json);
        } catch (JsonProcessingException e) {
            throw new NonTransientAiException("llb returned JSON that does not parse: " + e.getOriginalMessage(), e);
        }
    }

    /** A {@code chat.completion} as a {@link ChatResponse}: one generation per choice. */
    static ChatResponse response(String completionJson, String modelName) {
        JsonNode completion = parseCompletion(completionJson);
        List<Generation> generations = new ArrayList<>();
        for (JsonNode choice : completion.path("choices")) {
            JsonNode message = choice.path("message");
            Map<String, Object> properties = new LinkedHashMap<>();
            properties.put("id", completion.path("id").asText(""));
            properties.put("role", "assistant");
            properties.put("index", choice.path("index").asInt());
            properties.put("finishReason", choice.path("finish_reason").asText(""));
            properties.put(REASONING_CONTENT, message.path("reasoning_content").asText(""));
            List<AssistantMessage.ToolCall> calls = new ArrayList<>();
            for (JsonNode call : message.path("tool_calls")) {
                calls.add(new AssistantMessage.ToolCall(call.path("id").asText(""), "function",
                        call.path("function").path("name").asText(), call.path("function").path("arguments").asText("{}")));
            }
            AssistantMessage assistant = AssistantMessage.builder().content(message.path("content").asText(""))
                    .properties(properties).toolCalls(calls).build();
            generations.add(new Generation(assistant, generationMetadata(choice.path("finish_reason").asText(null))));
        }
        return new ChatResponse(generations, responseMetadata(completion, modelName));
    }

    static ChatGenerationMetadata generationMetadata(String finishReason) {
        if (finishReason == null || finishReason.isEmpty()) {
            return ChatGenerationMetadata.NULL;
        }
        return ChatGenerationMetadata.builder().finishReason(finishReason(finishReason)).build();
    }

    /**
     * llb's (OpenAI's) finish reason as Spring AI's OpenAI model reports it: upper case
     * ({@code STOP}, {@code LENGTH}, {@code TOOL_CALLS}; llb's own {@code CANCELLED}).
     */
    static String finishReason(String reason) {
        return reason.toUpperCase(Locale.ROOT);
    }

    static ChatResponseMetadata responseMetadata(JsonNode completion, String modelName) {
        ChatResponseMetadata.Builder b = ChatResponseMetadata.builder().id(completion.path("id").asText(""))
                .model(modelName).usage(usage(completion.path("usage")));
        if (completion.path("created").isNumber()) {
            b.keyValue("created", completion.path("created").asLong());
        }
        return b.build();
    }

    /** {@code usage} with {@code prompt_tokens_details.cached_tokens} as the cache-read count; the native usage is the JSON as a map. */
    static Usage usage(JsonNode usage) {
        if (!usage.isObject()) {
            return new DefaultUsage(0, 0, 0, null);
        }
        JsonNode cached = usage.path("prompt_tokens_details").path("cached_tokens");
        Map<?, ?> nativeUsage = MAPPER.convertValue(usage, Map.class);
        return new DefaultUsage(usage.path("prompt_tokens").asInt(), usage.path("completion_tokens").asInt(),
                usage.path("total_tokens").asInt(), nativeUsage, cached.isNumber() ? cached.asLong() : null, null);
    }

    /**
     * llb's error as Spring AI's: {@code busy} and {@code queue_full} (a pool at its bound; the
     * cause is a {@link dev.llb.QueueFullException}) are {@link TransientAiException}s (a retry
     * may succeed: Spring AI's retry templates retry them), every other code a
     * {@link NonTransientAiException}. The {@link LlbException} is the cause, so its
     * {@link LlbException#code()} stays reachable.
     */
    static RuntimeException error(LlbException e) {
        String message = "llb " + e.code() + ": " + e.getMessage();
        return e.isTransient() ? new TransientAiException(message, e) : new NonTransientAiException(message, e);
    }

    /**
     * One streamed request's {@code chat.completion.chunk}s as {@link ChatResponse} deltas: text
     * and reasoning as they come, each tool call once its arguments are complete (when the next
     * call starts, or the choice finishes), as Spring AI's OpenAI model does, so that Spring AI's
     * aggregation sees whole calls.
     */
    static final class Chunks {
        private final String modelName;
        private final Consumer<ChatResponse> out;
        private final StringBuilder reasoning = new StringBuilder();
        /** Tool calls being received, by index: id, name, arguments so far. */
        private final TreeMap<Integer, String[]> pending = new TreeMap<>();
        private String id = "";

        Chunks(String modelName, Consumer<ChatResponse> out) {
            this.modelName = modelName;
            this.out = out;
        }

        void accept(String chunkJson) {
            JsonNode chunk = parseCompletion(chunkJson);
            if (chunk.path("id").isTextual()) {
                id = chunk.path("id").asText();
            }
            JsonNode choice = chunk.path("choices").path(0);
            JsonNode delta = choice.path("delta");
            String thinking = delta.path("reasoning_content").asText("");
            String content = delta.path("content").asText("");
            if (!thinking.isEmpty() || !content.isEmpty()) {
                reasoning.append(thinking);
                emit(content, thinking, List.of());
            }
            for (JsonNode call : delta.path("tool_calls")) {
                int index = call.path("index").asInt();
                List<AssistantMessage.ToolCall> done = new ArrayList<>();
                while (!pending.isEmpty() && pending.firstKey() < index) {
                    done.add(toolCall(pending.pollFirstEntry().getValue()));
                }
                if (!done.isEmpty()) {
                    emit("", "", done);
                }
                String[] c = pending.computeIfAbsent(index, i -> new String[] {"", "", ""});
                if (call.path("id").isTextual()) {
                    c[0] = call.path("id").asText();
                }
                JsonNode function = call.path("function");
                if (function.path("name").isTextual()) {
                    c[1] += function.path("name").asText();
                }
                c[2] += function.path("arguments").asText("");
            }
        }

        /** After llb returned: the calls still open, then the finish reason and usage of the final completion. */
        void finish(String completionJson) {
            JsonNode completion = parseCompletion(completionJson);
            List<AssistantMessage.ToolCall> done = new ArrayList<>();
            while (!pending.isEmpty()) {
                done.add(toolCall(pending.pollFirstEntry().getValue()));
            }
            String reason = completion.path("choices").path(0).path("finish_reason").asText(null);
            AssistantMessage message = AssistantMessage.builder().content("").properties(properties("")).toolCalls(done).build();
            out.accept(new ChatResponse(List.of(new Generation(message, generationMetadata(reason))),
                    responseMetadata(completion, modelName)));
        }

        private static AssistantMessage.ToolCall toolCall(String[] c) {
            return new AssistantMessage.ToolCall(c[0], "function", c[1], c[2].isEmpty() ? "{}" : c[2]);
        }

        private Map<String, Object> properties(String reasoningDelta) {
            Map<String, Object> properties = new LinkedHashMap<>();
            properties.put("id", id);
            properties.put("role", "assistant");
            properties.put(REASONING_CONTENT, reasoning.toString());
            properties.put(REASONING_DELTA, reasoningDelta);
            return properties;
        }

        private void emit(String content, String reasoningDelta, List<AssistantMessage.ToolCall> calls) {
            AssistantMessage message = AssistantMessage.builder().content(content).properties(properties(reasoningDelta))
                    .toolCalls(calls).build();
            out.accept(new ChatResponse(List.of(new Generation(message)),
                    ChatResponseMetadata.builder().id(id).model(modelName).build()));
        }
    }
}
