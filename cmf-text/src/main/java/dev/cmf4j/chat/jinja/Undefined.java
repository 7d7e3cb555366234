package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

/**
 * jinja2's default {@code Undefined}: prints as the empty string, is falsy, iterates as empty, has
 * length 0, equals only another Undefined; any other use (arithmetic, attribute or item access,
 * calling, ordering) raises {@code UndefinedError} with jinja2's message.
 */
final class Undefined {

    private static final Object MISSING = new Object();

    private final String hint;
    private final Object obj;
    private final Object name;
    private final Kind errorKind;

    private Undefined(String hint, Object obj, Object name, Kind errorKind) {
        this.hint = hint;
        this.obj = obj;
        this.name = name;
        this.errorKind = errorKind;
    }

    /** A variable that does not exist. */
    static Undefined name(String name) {
        return new Undefined(null, MISSING, name, Kind.UndefinedError);
    }

    /** A missing attribute or item of obj (name is the attribute string or the item key). */
    static Undefined member(Object obj, Object name) {
        return new Undefined(null, obj, name, Kind.UndefinedError);
    }

    static Undefined hint(String hint, Object name) {
        return new Undefined(hint, MISSING, name, Kind.UndefinedError);
    }

    /** What the sandbox returns for a forbidden attribute: using it raises SecurityError. */
    static Undefined unsafe(Object obj, String attr) {
        return new Undefined("access to attribute '" + attr + "' of '" + PyTypes.typeName(obj) + "' object is unsafe.", obj, attr, Kind.SecurityError);
    }

    /** jinja2's {@code Undefined._undefined_message}. */
    String message() {
        if (hint != null) return hint;
        if (obj == MISSING) return PyRepr.repr(name) + " is undefined";
        if (!(name instanceof String)) return PyTypes.objectTypeRepr(obj) + " has no element " + PyRepr.repr(name);
        return PyRepr.repr(PyTypes.objectTypeRepr(obj)) + " has no attribute " + PyRepr.repr(name);
    }

    TemplateException error() {
        return new TemplateException(errorKind, message());
    }

    @Override
    public String toString() {
        return "";
    }
}
