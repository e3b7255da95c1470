package com.example.springai;

import dev.llb.springai.LlbChatModel;
import dev.llb.springai.LlbChatOptions;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.micrometer.observation.ObservationRegistry;
import java.nio.file.Path;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.observation.ChatModelMeterObservationHandler;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.tool.ToolCallback;
import org.springframework.ai.tool.annotation.ToolParam;
import org.springframework.ai.tool.function.FunctionToolCallback;

/**
 * Asks the model for the weather in Paris through Spring AI, with one tool callback,
 * {@code get_weather}, and {@code toolChoice("required")}; prints the tool call it makes and what
 * the tool answers to it. Then asks for a {@link Weather} record through {@code ChatClient} with
 * provider-native structured output (llb's grammar holds the reply to the record's schema) and
 * prints it, and last the token usage Spring AI's meter handler counted from the model's
 * {@code gen_ai.client.operation} observations ({@code gen_ai.client.token.usage}).
 *
 * <pre>java --enable-native-access=ALL-UNNAMED -cp 'target/classes:target/lib/*' com.example.springai.Main MODEL.gguf</pre>
 */
public final class Main {
    private Main() {}

    /** The cities the tool knows. */
    public enum City { Paris, Tokyo, Lima }

    /**
     * The tool's input.
     *
     * @param city the city
     */
    public record WeatherRequest(@ToolParam(description = "the city") City city) {}

    /**
     * The structured answer.
     *
     * @param city the city
     * @param celsius the temperature
     * @param sunny whether the sun shines
     */
    public record Weather(City city, int celsius, boolean sunny) {}

    /**
     * Runs the request.
     *
     * @param args the GGUF model's path
     */
    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: Main MODEL.gguf");
            System.exit(2);
        }
        ToolCallback weather = FunctionToolCallback.builder("get_weather", (WeatherRequest r) -> "Sunny, 21 degrees in " + r.city())
                .description("Current weather of a city").inputType(WeatherRequest.class).build();
        // One decoding thread and one request at a time: enough for a tiny model, and fair to a busy machine.
        // Metrics: Spring AI's meter handler on the model's observations (Boot Actuator wires the same).
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        ObservationRegistry observations = ObservationRegistry.create();
        observations.observationConfig().observationHandler(new ChatModelMeterObservationHandler(meters));
        try (LlbChatModel model = LlbChatModel.builder().modelPath(Path.of(args[0])).contextSize(1024).threads(1).parallel(1)
                .observationRegistry(observations).build()) {
            LlbChatOptions options = LlbChatOptions.builder().toolChoice("required").parallelToolCalls(false)
                    .maxTokens(96).temperature(0.0).seed(42L).toolCallbacks(weather).build();
            ChatResponse response = model.call(new Prompt("What is the weather in Paris?", options));
            AssistantMessage.ToolCall call = response.getResult().getOutput().getToolCalls().get(0);
            System.out.println("finish_reason: " + response.getResult().getMetadata().getFinishReason());
            System.out.println("tool: " + call.name());
            System.out.println("arguments: " + call.arguments());
            System.out.println("result: " + weather.call(call.arguments()));

            Weather entity = ChatClient.create(model).prompt().user("What is the weather in Paris?")
                    .options(LlbChatOptions.builder().maxTokens(96).temperature(0.0).seed(42L)).call()
                    .entity(Weather.class, spec -> spec.useProviderStructuredOutput());
            System.out.println("entity: " + entity);

            for (String type : new String[] {"input", "output"}) {
                Counter tokens = meters.find("gen_ai.client.token.usage").tag("gen_ai.token.type", type).counter();
                System.out.println("gen_ai.client.token.usage " + type + ": " + (tokens == null ? 0 : (long) tokens.count()));
            }
        }
    }
}
