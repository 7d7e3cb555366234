package dev.cmf4j.api;

/**
 * A function the model may call, rendered into the prompt by the model's own chat template (as transformers passes
 * {@code tools}).
 *
 * @param name           the function's name
 * @param description    what it does, for the model; may be null
 * @param parametersJson its parameters as a JSON Schema object's text (e.g. {@code {"type": "object", "properties":
 *                       {"city": {"type": "string"}}, "required": ["city"]}}); null for none
 */
public record Tool(String name, String description, String parametersJson) {
    public Tool {
        if (name == null || name.isEmpty()) throw new IllegalArgumentException("a tool needs a name");
    }
}
