package dev.cmf4j.chat.jinja;

/** A function a template can call: globals such as {@code range}, {@code namespace}, {@code raise_exception}. */
@FunctionalInterface
interface PyCallable {
    Object call(Args args);
}
