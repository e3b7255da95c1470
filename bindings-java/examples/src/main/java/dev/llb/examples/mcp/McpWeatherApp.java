package dev.llb.examples.mcp;

import java.nio.file.Path;
import java.util.Map;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.tool.ToolCallbackProvider;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * A Spring Boot application whose local model (llb, in this process) calls the tools of an MCP
 * server (here {@link WeatherMcpServer}, started over stdio by Spring AI's MCP client):
 *
 * <pre>
 * java -cp CLASSPATH dev.llb.examples.mcp.McpWeatherApp --llb.chat.model-path=model.gguf [--question="..."]
 * </pre>
 *
 * The model bean comes from llb's auto-configuration ({@code llb.chat.*}), the MCP tools from
 * Spring AI's ({@code spring.ai.mcp.client.*}); another MCP server is another
 * {@code spring.ai.mcp.client.stdio.connections.NAME.command}/{@code args} pair.
 */
@SpringBootApplication
public class McpWeatherApp {
    /**
     * Starts the application, asks the question, prints the answer, stops.
     *
     * @param args Spring Boot arguments: {@code --llb.chat.model-path=...}, {@code --question=...}
     */
    public static void main(String[] args) {
        try (ConfigurableApplicationContext context = start(args)) {
            String question = context.getEnvironment().getProperty("question", "What is the weather in Paris?");
            System.out.println(ask(context.getBean(ChatModel.class), context.getBean(ToolCallbackProvider.class), question));
        }
    }

    /**
     * The application context: llb's chat model and an MCP client of {@link WeatherMcpServer}.
     * The defaults force one tool call, then let the model answer with its result (small local
     * models seldom call by themselves); {@code --llb.chat.options.tool-choice=auto} lets it choose.
     *
     * @param args Spring Boot arguments, which override the defaults
     * @return the running context (close it to stop the MCP server and free the model)
     */
    public static ConfigurableApplicationContext start(String... args) {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        SpringApplication app = new SpringApplication(McpWeatherApp.class);
        app.setWebApplicationType(WebApplicationType.NONE);
        app.setDefaultProperties(Map.of(
                "spring.ai.mcp.client.stdio.connections.weather.command", java,
                "spring.ai.mcp.client.stdio.connections.weather.args",
                "-cp," + System.getProperty("java.class.path") + "," + WeatherMcpServer.class.getName(),
                "llb.chat.options.tool-choice", "required",
                "llb.chat.options.tool-choice-after-tools", "none",
                "llb.chat.options.temperature", "0"));
        return app.run(args);
    }

    /**
     * One question through Spring AI's {@code ChatClient}, with the MCP server's tools.
     *
     * @param model the chat model (llb's bean)
     * @param mcpTools the MCP client's tools (Spring AI's bean)
     * @param question the user's question
     * @return the model's answer
     */
    public static String ask(ChatModel model, ToolCallbackProvider mcpTools, String question) {
        return ChatClient.create(model).prompt().user(question).tools(mcpTools).call().content();
    }
}
