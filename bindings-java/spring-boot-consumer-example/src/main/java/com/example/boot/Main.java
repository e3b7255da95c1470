package com.example.boot;

import java.util.Map;
import java.util.TreeMap;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.CommandLineRunner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ApplicationContext;
import org.springframework.context.annotation.Bean;

/**
 * A Boot application with two Spring AI providers' starters, llb's and Ollama's: prints the
 * {@link ChatModel} beans it got, by name and class, and when the one ChatModel is llb's, asks it a
 * question through the auto-configured {@code ChatClient.Builder} and prints how long the answer is.
 *
 * <pre>java --enable-native-access=ALL-UNNAMED -cp 'target/classes:target/lib/*' com.example.boot.Main \
 *     --spring.ai.model.chat=llb --llb.chat.model-path=MODEL.gguf</pre>
 */
@SpringBootApplication
public class Main {
    /** Created by Spring. */
    public Main() {}

    /**
     * Runs the application (no web server).
     *
     * @param args Spring Boot's arguments: {@code --key=value} properties
     */
    public static void main(String[] args) {
        SpringApplication app = new SpringApplication(Main.class);
        app.setWebApplicationType(WebApplicationType.NONE);
        app.run(args).close();
    }

    /**
     * What the application does once started.
     *
     * @param context the application's context
     * @param chatClient the auto-configured builder, when there is one ChatModel
     * @return the runner
     */
    @Bean
    CommandLineRunner report(ApplicationContext context, ObjectProvider<ChatClient.Builder> chatClient) {
        return args -> {
            Map<String, String> models = new TreeMap<>();
            for (Map.Entry<String, ChatModel> e : context.getBeansOfType(ChatModel.class).entrySet()) {
                models.put(e.getKey(), e.getValue().getClass().getName());
            }
            System.out.println("chat models: " + models);
            if (models.size() == 1 && models.values().iterator().next().startsWith("dev.llb.")) {
                String answer = chatClient.getObject().build().prompt().user("What is the weather in Paris?").call().content();
                System.out.println("chat client answered: " + (answer == null ? -1 : answer.length()) + " chars");
            }
        };
    }
}
