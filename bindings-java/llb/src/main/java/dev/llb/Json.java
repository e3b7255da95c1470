package dev.llb;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;

/** The binding's JSON plumbing (Jackson); requests and responses stay text for the caller. */
final class Json {
    static final ObjectMapper MAPPER = new ObjectMapper()
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);

    private Json() {}

    /** Parses JSON that llb produced; llb always produces JSON, so a failure is an llb bug. */
    static JsonNode parse(String json) {
        try {
            return MAPPER.readTree(json);
        } catch (JsonProcessingException e) {
            throw new LlbException("internal", "llb returned text that is not JSON: " + e.getOriginalMessage(), json);
        }
    }

    /** Returns {@code json} unless it is llb's {@code {"type":"error",...}}, which it throws. */
    static String orThrow(String json) {
        if (isError(json)) {
            throw LlbException.fromJson(parse(json), json);
        }
        return json;
    }

    /**
     * Whether the top-level object has {@code "type":"error"}. llb writes {@code "type"} first in
     * errors, events and info objects, and {@code "id"} first in completions, so the first key
     * decides at no cost; any other text is scanned (without building a tree).
     */
    static boolean isError(String json) {
        if (json.startsWith("{\"type\":")) {
            return json.startsWith("{\"type\":\"error\"");
        }
        if (json.startsWith("{\"id\":")) {
            return false;
        }
        return scanForError(json);
    }

    private static boolean scanForError(String json) {
        try (JsonParser p = MAPPER.getFactory().createParser(json)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                return false;
            }
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.currentName();
                JsonToken value = p.nextToken();
                if ("type".equals(name)) {
                    return value == JsonToken.VALUE_STRING && "error".equals(p.getText());
                }
                p.skipChildren();
            }
            return false;
        } catch (IOException e) {
            throw new LlbException("internal", "llb returned text that is not JSON: " + e.getMessage(), json);
        }
    }

    /**
     * The request with {@code "stream":true}. Text that is not a JSON object goes through unchanged,
     * so that llb reports it ({@code invalid_json} / {@code invalid_argument}) in its own words.
     */
    static String withStreamTrue(String request) {
        JsonNode node;
        try {
            node = MAPPER.readTree(request);
        } catch (JsonProcessingException e) {
            return request;
        }
        if (!(node instanceof ObjectNode object)) {
            return request;
        }
        if (object.path("stream").isBoolean() && object.get("stream").booleanValue()) {
            return request;
        }
        object.put("stream", true);
        try {
            return MAPPER.writeValueAsString(object);
        } catch (JsonProcessingException e) {
            throw new IllegalStateException("re-serializing a parsed request failed", e);
        }
    }

    static Map<String, Boolean> booleanMap(JsonNode object) {
        Map<String, Boolean> map = new LinkedHashMap<>();
        object.properties().forEach(e -> map.put(e.getKey(), e.getValue().asBoolean()));
        return map;
    }

    /** The text of a field, or {@code null} when it is absent or JSON null. */
    static String text(JsonNode node, String field) {
        JsonNode v = node.get(field);
        return v == null || v.isNull() ? null : v.asText();
    }
}
