/** An application that asks a local model for a tool call through llb. */
module com.example.weather {
    requires dev.llb;
    requires com.fasterxml.jackson.databind;
}
