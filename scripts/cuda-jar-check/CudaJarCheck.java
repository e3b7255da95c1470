import dev.llb.ChatConfig;
import dev.llb.ChatEngine;
import dev.llb.Llb;
import dev.llb.VersionInfo;
import java.nio.file.Path;

/**
 * scripts/cuda-jar-check.sh's probe: prints what the loader chose and answers one forced tool call
 * on the fixture given as the first argument. One line each: platform, backends, cpu, note, call.
 */
public final class CudaJarCheck {
    private static final String REQUEST = """
            {"messages":[{"role":"user","content":"What is the weather in Paris?"}],
             "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city",
               "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],
             "tool_choice":"required","temperature":0,"max_tokens":48,"seed":1}""";

    public static void main(String[] args) {
        VersionInfo v = Llb.version();
        System.out.println("platform: " + v.platform());
        System.out.println("backends: " + String.join(",", v.backends()));
        System.out.println("cpu: " + v.cpuVariant());
        System.out.println("note: " + v.loaderNote());
        try (ChatEngine engine = ChatEngine.open(ChatConfig.of(Path.of(args[0])).withContextSize(1024).withThreads(2))) {
            String reply = engine.infer(REQUEST);
            System.out.println("call: " + (reply.contains("\"get_weather\"") && reply.contains("\"tool_calls\"")
                    ? "tool call get_weather" : "no tool call: " + reply));
        }
    }
}
