package dev.llb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The binding's own JSON handling: spotting llb's errors, and turning streaming on. */
class JsonTest {
    @Test
    void errorsAreRecognizedWhateverTheKeyOrder() {
        assertTrue(Json.isError("{\"type\":\"error\",\"code\":\"busy\",\"message\":\"m\"}"));
        assertTrue(Json.isError("{\"code\":\"busy\",\"message\":\"m\",\"extra\":{\"type\":\"x\"},\"type\":\"error\"}"));
        assertFalse(Json.isError("{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"choices\":[]}"));
        assertFalse(Json.isError("{\"type\":\"model_info\",\"supports_tools\":true}"));
        assertFalse(Json.isError("{\"object\":\"chat.completion\",\"choices\":[{\"type\":\"error\"}]}"));
    }

    @Test
    void streamIsSetAndOtherTextPassesThroughForLlbToJudge() {
        // Numbers keep every digit (no round trip through double or long).
        String request = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                + "\"temperature\":0.30000000000000000001,\"seed\":18446744073709551615,\"stream\":false}";
        assertEquals("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                + "\"temperature\":0.30000000000000000001,\"seed\":18446744073709551615,\"stream\":true}",
                Json.withStreamTrue(request));
        String already = "{\"stream\":true, \"messages\":[]}";
        assertSame(already, Json.withStreamTrue(already));
        for (String notAnObject : new String[] {"{\"messages\": [", "[1,2]", "{\"a\":1} trailing", ""}) {
            assertSame(notAnObject, Json.withStreamTrue(notAnObject));
        }
    }
}
