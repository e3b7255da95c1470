package dev.llb.langchain4j;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.agent.tool.ToolSpecification;
import dev.langchain4j.data.message.AiMessage;
import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.data.message.Content;
import dev.langchain4j.data.message.SystemMessage;
import dev.langchain4j.data.message.TextContent;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.exception.InternalServerException;
import dev.langchain4j.exception.InvalidRequestException;
import dev.langchain4j.exception.LangChain4jException;
import dev.langchain4j.exception.ModelNotFoundException;
import dev.langchain4j.exception.NonRetriableException;
import dev.langchain4j.exception.RetriableException;
import dev.langchain4j.exception.UnsupportedFeatureException;
import dev.langchain4j.internal.JsonSchemaElementUtils;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ChatRequestParameters;
import dev.langchain4j.model.chat.request.ResponseFormat;
import dev.langchain4j.model.chat.request.ResponseFormatType;
import dev.langchain4j.model.chat.request.ToolChoice;
import dev.langchain4j.model.chat.request.json.JsonAnyOfSchema;
import dev.langchain4j.model.chat.request.json.JsonArraySchema;
import dev.langchain4j.model.chat.request.json.JsonObjectSchema;
import dev.langchain4j.model.chat.request.json.JsonSchemaElement;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.output.FinishReason;
import dev.llb.LlbException;
import java.util.ArrayList;
import java.util.List;

/** LangChain4j's chat types to llb's OpenAI request JSON, llb's completion JSON back, llb's errors to LangChain4j's. */
final class Mapping {
    static final ObjectMapper MAPPER = new ObjectMapper();

    private Mapping() {}

    /**
     * A model's way of writing requests and reading replies.
     *
     * @param strictTools tools in OpenAI's strict mode
     * @param returnThinking whether the reply's reasoning is returned
     */
    record Style(boolean strictTools, boolean returnThinking) {}

    static String request(ChatRequest request, Style style) {
        ObjectNode body = MAPPER.createObjectNode();
        ArrayNode messages = body.putArray("messages");
        for (ChatMessage message : request.messages()) {
            messages.add(message(message));
        }
        ChatRequestParameters p = request.parameters();
        if (p.modelName() != null) {
            body.put("model", p.modelName());
        }
        if (p.temperature() != null) {
            body.put("temperature", p.temperature());
        }
        if (p.topP() != null) {
            body.put("top_p", p.topP());
        }
        if (p.topK() != null) {
            body.put("top_k", p.topK());
        }
        // llb decides whether it supports these (its error names the field).
        if (p.frequencyPenalty() != null) {
            body.put("frequency_penalty", p.frequencyPenalty());
        }
        if (p.presencePenalty() != null) {
            body.put("presence_penalty", p.presencePenalty());
        }
        if (p.maxOutputTokens() != null) {
            body.put("max_tokens", p.maxOutputTokens());
        }
        if (p.stopSequences() != null && !p.stopSequences().isEmpty()) {
            ArrayNode stop = body.putArray("stop");
            p.stopSequences().forEach(stop::add);
        }
        if (p.responseFormat() != null) {
            body.set("response_format", responseFormat(p.responseFormat()));
        }
        List<ToolSpecification> tools = p.toolSpecifications();
        if (tools != null && !tools.isEmpty()) {
            ArrayNode array = body.putArray("tools");
            for (ToolSpecification tool : tools) {
                array.add(tool(tool, style.strictTools()));
            }
            if (p.toolChoice() != null) {
                body.put("tool_choice", toolChoice(p.toolChoice()));
            }
            if (p instanceof LlbChatRequestParameters llb && llb.parallelToolCalls() != null) {
                body.put("parallel_tool_calls", llb.parallelToolCalls());
            }
        } else if (p.toolChoice() == ToolChoice.REQUIRED) {
            throw new InvalidRequestException("ToolChoice.REQUIRED needs at least one tool specification");
        }
        if (p instanceof LlbChatRequestParameters llb) {
            llbFields(body, llb);
        }
        return body.toString();
    }

    /** {@link LlbChatRequestParameters}' own fields that are set, by llb's names. */
    private static void llbFields(ObjectNode body, LlbChatRequestParameters p) {
        if (p.seed() != null) {
            body.put("seed", p.seed());
        }
        if (p.reasoningBudget() != null) {
            body.put("reasoning_budget", p.reasoningBudget());
        }
        if (p.speculative() != null) {
            body.put("speculative", p.speculative());
        }
    }

    /**
     * AUTO, REQUIRED and NONE are OpenAI's {@code "auto"}, {@code "required"} and {@code "none"}.
     * LangChain4j 1.8 cannot name one tool; REQUIRED with a single tool specification forces that tool.
     */
    static String toolChoice(ToolChoice choice) {
        return switch (choice) {
            case AUTO -> "auto";
            case REQUIRED -> "required";
            case NONE -> "none";
        };
    }

    /**
     * {@code {"type":"function","function":{"name","description","parameters"}}}; parameters as
     * LangChain4j's OpenAI module writes them. Strict: {@code "strict":true}, and every object
     * closed ({@code "additionalProperties":false}) with all its properties required, as OpenAI's
     * strict mode wants; llb's grammar then allows nothing else.
     */
    static ObjectNode tool(ToolSpecification spec, boolean strict) {
        ObjectNode tool = MAPPER.createObjectNode().put("type", "function");
        ObjectNode function = tool.putObject("function").put("name", spec.name());
        if (spec.description() != null) {
            function.put("description", spec.description());
        }
        if (spec.parameters() != null) {
            function.set("parameters", schema(spec.parameters(), strict));
        } else {
            ObjectNode empty = function.putObject("parameters").put("type", "object");
            empty.putObject("properties");
            if (strict) {
                empty.put("additionalProperties", false);
            }
        }
        if (strict) {
            function.put("strict", true);
        }
        return tool;
    }

    /**
     * A LangChain4j schema as JSON Schema, as LangChain4j's OpenAI module writes it, except that an
     * object's own {@code additionalProperties} is kept when not strict (LangChain4j's writer drops
     * it): llb's grammar honours it, and a closed object keeps a model from inventing properties.
     */
    static ObjectNode schema(JsonSchemaElement element, boolean strict) {
        ObjectNode node = MAPPER.valueToTree(JsonSchemaElementUtils.toMap(element, strict));
        if (!strict) {
            keepAdditionalProperties(element, node);
        }
        return node;
    }

    private static void keepAdditionalProperties(JsonSchemaElement element, JsonNode node) {
        if (!(node instanceof ObjectNode object)) {
            return;
        }
        switch (element) {
            case JsonObjectSchema o -> {
                if (o.additionalProperties() != null) {
                    object.put("additionalProperties", o.additionalProperties());
                }
                o.properties().forEach((name, value) -> keepAdditionalProperties(value, object.path("properties").path(name)));
                o.definitions().forEach((name, value) -> keepAdditionalProperties(value, object.path("$defs").path(name)));
            }
            case JsonArraySchema a -> {
                if (a.items() != null) {
                    keepAdditionalProperties(a.items(), object.path("items"));
                }
            }
            case JsonAnyOfSchema a -> {
                for (int i = 0; i < a.anyOf().size(); i++) {
                    keepAdditionalProperties(a.anyOf().get(i), object.path("anyOf").path(i));
                }
            }
            default -> {}
        }
    }

    static ObjectNode responseFormat(ResponseFormat format) {
        ObjectNode node = MAPPER.createObjectNode();
        if (format.type() == ResponseFormatType.TEXT) {
            return node.put("type", "text");
        }
        if (format.jsonSchema() == null) {
            return node.put("type", "json_object");
        }
        node.put("type", "json_schema");
        ObjectNode schema = node.putObject("json_schema");
        schema.put("name", format.jsonSchema().name() != null ? format.jsonSchema().name() : "response");
        schema.set("schema", schema(format.jsonSchema().rootElement(), false));
        return node;
    }

    static ObjectNode message(ChatMessage message) {
        ObjectNode node = MAPPER.createObjectNode();
        switch (message) {
            case SystemMessage m -> node.put("role", "system").put("content", m.text());
            case UserMessage m -> {
                node.put("role", "user");
                if (m.name() != null) {
                    node.put("name", m.name());
                }
                if (m.hasSingleText()) {
                    node.put("content", m.singleText());
                } else {
                    ArrayNode parts = node.putArray("content");
                    for (Content content : m.contents()) {
                        if (!(content instanceof TextContent text)) {
                            throw new UnsupportedFeatureException("llb runs text models: a user message's " + content.type()
                                    + " content cannot be sent (only TEXT)");
                        }
                        parts.addObject().put("type", "text").put("text", text.text());
                    }
                }
            }
            case AiMessage m -> {
                node.put("role", "assistant");
                if (m.text() != null) {
                    node.put("content", m.text());
                } else {
                    node.putNull("content");
                }
                if (m.thinking() != null) {
                    node.put("reasoning_content", m.thinking());
                }
                if (m.hasToolExecutionRequests()) {
                    ArrayNode calls = node.putArray("tool_calls");
                    for (ToolExecutionRequest r : m.toolExecutionRequests()) {
                        ObjectNode call = calls.addObject();
                        if (r.id() != null) {
                            call.put("id", r.id());
                        }
                        call.put("type", "function");
                        call.putObject("function").put("name", r.name())
                                .put("arguments", r.arguments() == null ? "{}" : r.arguments());
                    }
                }
            }
            case ToolExecutionResultMessage m -> {
                node.put("role", "tool").put("content", m.text());
                if (m.id() != null) {
                    node.put("tool_call_id", m.id());
                }
            }
            default -> throw new UnsupportedFeatureException("llb cannot send a " + message.type() + " message");
        }
        return node;
    }

    static JsonNode parse(String json) {
        try {
            return MAPPER.readTree(json);
        } catch (JsonProcessingException e) {
            throw new InternalServerException("llb returned JSON that does not parse: " + e.getOriginalMessage());
        }
    }

    /** A {@code chat.completion} as a {@link ChatResponse}; its reasoning only when {@code returnThinking}. */
    static ChatResponse response(String completionJson, String modelName, boolean returnThinking) {
        JsonNode completion = parse(completionJson);
        JsonNode choice = completion.path("choices").path(0);
        JsonNode message = choice.path("message");
        AiMessage.Builder ai = AiMessage.builder();
        if (message.path("content").isTextual()) {
            ai.text(message.path("content").asText());
        }
        if (returnThinking && message.path("reasoning_content").isTextual()) {
            ai.thinking(message.path("reasoning_content").asText());
        }
        List<ToolExecutionRequest> calls = new ArrayList<>();
        for (JsonNode call : message.path("tool_calls")) {
            calls.add(ToolExecutionRequest.builder().id(call.path("id").asText(null))
                    .name(call.path("function").path("name").asText())
                    .arguments(call.path("function").path("arguments").asText()).build());
        }
        if (!calls.isEmpty()) {
            ai.toolExecutionRequests(calls);
        }
        return ChatResponse.builder().aiMessage(ai.build()).id(completion.path("id").asText(null))
                .modelName(modelName).tokenUsage(usage(completion.path("usage")))
                .finishReason(finishReason(choice.path("finish_reason").asText(null))).build();
    }

    static LlbTokenUsage usage(JsonNode usage) {
        if (usage.isMissingNode() || usage.isNull()) {
            return null;
        }
        JsonNode cached = usage.path("prompt_tokens_details").path("cached_tokens");
        return new LlbTokenUsage(integer(usage.path("prompt_tokens")), integer(usage.path("completion_tokens")),
                integer(usage.path("total_tokens")), integer(cached));
    }

    private static Integer integer(JsonNode n) {
        return n.isNumber() ? n.asInt() : null;
    }

    /** {@code stop}, {@code length}, {@code tool_calls}; llb's {@code cancelled} is OTHER. */
    static FinishReason finishReason(String reason) {
        if (reason == null) {
            return null;
        }
        return switch (reason) {
            case "stop" -> FinishReason.STOP;
            case "length" -> FinishReason.LENGTH;
            case "tool_calls" -> FinishReason.TOOL_EXECUTION;
            case "content_filter" -> FinishReason.CONTENT_FILTER;
            default -> FinishReason.OTHER;
        };
    }

    /**
     * llb's error code (docs/errors.md) as LangChain4j's exception; the {@link LlbException} is the
     * cause, so {@code ((LlbException) e.getCause()).code()} is llb's code.
     */
    static LangChain4jException error(LlbException e) {
        String message = "llb " + e.code() + ": " + e.getMessage();
        return switch (e.code()) {
            case "invalid_argument", "invalid_json", "context_overflow" -> new InvalidRequestException(message, e);
            case "file_not_found" -> new ModelNotFoundException(message, e);
            case "tools_unsupported" -> {
                UnsupportedFeatureException u = new UnsupportedFeatureException(message);
                u.initCause(e);
                yield u;
            }
            // queue_full (a pool at its bound) and busy: the same call may succeed later.
            case "busy", "queue_full" -> new RetriableException(message, e);
            case "internal", "context_create_failed" -> new InternalServerException(message, e);
            default -> new NonRetriableException(message, e);
        };
    }
}
