package dev.cmf4j.chat.jinja;

/**
 * markupsafe's {@code Markup}: a str marked as safe HTML, made by the {@code safe} and
 * {@code escape} filters. It prints and compares as its text, but {@code +}, {@code %},
 * {@code join}, {@code format} and most str methods HTML-escape the plain strings mixed into it
 * and return Markup again (transformers renders with autoescape off, yet templates such as
 * functionary's do {@code "..."|safe + name}).
 */
record Markup(String text) {

    /** markupsafe.escape: Markup stays as is; anything else is str()-ed and &, <, >, ", ' escaped. */
    static Markup escape(Object v) {
        if (v instanceof Markup m) return m;
        return new Markup(Filters.escapeHtml(PyRepr.str(v)));
    }

    /** markupsafe.escape of an argument: str and Markup are escaped, other values pass through. */
    static Object escapeArg(Object v) {
        return v instanceof String || v instanceof Markup ? escape(v) : v;
    }

    /** The text of a str or Markup value (for code that treats both as str). */
    static Object plain(Object v) {
        return v instanceof Markup m ? m.text() : v;
    }
}
