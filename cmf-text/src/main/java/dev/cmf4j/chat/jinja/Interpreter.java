package dev.cmf4j.chat.jinja;

import dev.cmf4j.chat.jinja.TemplateException.Kind;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Renders a parsed template. Scoping follows jinja2: {@code if} shares its scope; each for-loop
 * iteration, macro call and {@code with} body gets a child scope, so a {@code set} inside a loop is
 * gone after the loop and re-read from outside at each iteration ({@code namespace()} is the way
 * out, as in jinja2).
 */
final class Interpreter {

    /** Output cap per buffer (chars): a hostile template must not exhaust memory. */
    static final long MAX_OUTPUT_CHARS = 16L << 20;   // ~4M tokens of prompt; 64 Mi let one hostile render spend seconds building strings
    /** Macro / recursive-loop nesting cap (Python's own recursion limit is about 1000 frames). */
    static final int MAX_CALL_DEPTH = 250;
    /** jinja2's sandbox MAX_RANGE. */
    static final long MAX_RANGE = 100_000;
    /**
     * Statements run plus loop iterations per render: a hostile template must not hang (nested loops over
     * MAX_RANGE-long ranges, exponential macro recursion). Real chat templates take thousands.
     */
    static final long MAX_STEPS = 2_000_000;
    /**
     * Wall time per render: steps differ in cost (a macro call binds a scope and renders a body), so two million of
     * them took 5–15 s on hostile inputs the fuzzer found; real chat templates render in milliseconds.
     */
    static final long MAX_RENDER_MILLIS = Long.getLong("cmf.template.maxRenderMillis", 2_000);

    private final Map<String, Object> globals;
    private final long maxRenderMillis, deadline;
    private int callDepth;
    private long steps;

    Interpreter(Map<String, Object> globals) { this(globals, MAX_RENDER_MILLIS); }

    Interpreter(Map<String, Object> globals, long maxRenderMillis) {
        this.globals = globals;
        this.maxRenderMillis = maxRenderMillis;
        this.deadline = System.nanoTime() + maxRenderMillis * 1_000_000;
    }

    // ---- scopes

    static final class Scope {
        final Scope parent;
        final Map<String, Object> vars = new HashMap<>();

        Scope(Scope parent) {
            this.parent = parent;
        }
    }

    private Object lookup(String name, Scope scope) {
        for (Scope s = scope; s != null; s = s.parent) {
            Object v = s.vars.get(name);
            if (v != null || s.vars.containsKey(name)) return v;
        }
        Object g = globals.get(name);
        if (g != null || globals.containsKey(name)) return g;
        return Undefined.name(name);
    }

    enum Signal { NORMAL, BREAK, CONTINUE }

    // ---- entry

    String render(List<Node> body, Map<String, Object> vars) {
        Scope root = new Scope(null);
        root.vars.putAll(vars);
        StringBuilder out = new StringBuilder();
        try {
            exec(body, root, out);
        } catch (StackOverflowError e) {
            throw new TemplateException(Kind.LimitExceeded, "template nesting too deep (stack exhausted)");
        }
        return out.toString();
    }

    private static void append(StringBuilder out, String s) {
        if (out.length() + (long) s.length() > MAX_OUTPUT_CHARS) {
            throw new TemplateException(Kind.LimitExceeded, "rendered output exceeds " + MAX_OUTPUT_CHARS + " characters");
        }
        out.append(s);
    }

    private Signal exec(List<Node> nodes, Scope scope, StringBuilder out) {
        for (Node n : nodes) {
            Signal s;
            try {
                s = exec(n, scope, out);
            } catch (TemplateException e) {
                throw e.atLine(n.line());
            }
            if (s != Signal.NORMAL) return s;
        }
        return Signal.NORMAL;
    }

    private void step() {
        if (++steps > MAX_STEPS) {
            throw new TemplateException(Kind.LimitExceeded, "template ran more than " + MAX_STEPS + " steps (statements and loop iterations)");
        }
        if ((steps & 1023) == 0 && System.nanoTime() - deadline > 0)
            throw new TemplateException(Kind.LimitExceeded, "template rendering took longer than " + maxRenderMillis
                    + " ms (-Dcmf.template.maxRenderMillis raises the limit)");
    }

    private Signal exec(Node node, Scope scope, StringBuilder out) {
        step();
        switch (node) {
            case Node.Data d -> append(out, d.text());
            case Node.Output o -> append(out, PyRepr.str(eval(o.expr(), scope)));
            case Node.If i -> {
                for (Node.IfBranch b : i.branches()) {
                    if (PyTypes.truthy(eval(b.test(), scope))) return exec(b.body(), scope, out);
                }
                return exec(i.otherwise(), scope, out);
            }
            case Node.For f -> runLoop(f, eval(f.iter(), scope), scope, out, 0);
            case Node.Set s -> {
                Object v = eval(s.value(), scope);
                assign(s.target(), v, scope);
            }
            case Node.SetBlock s -> {
                StringBuilder buf = new StringBuilder();
                exec(s.body(), new Scope(scope), buf);
                Object v = buf.toString();
                if (s.filter() != null) v = applyFilterChain(s.filter(), v, scope);
                assign(s.target(), v, scope);
            }
            case Node.Macro m -> scope.vars.put(m.name(), new MacroValue(this, m, scope));
            case Node.CallBlock c -> {
                MacroValue caller = new MacroValue(this, c.caller(), scope);
                Object fn = eval(c.call().fn(), scope);
                Args a = evalArgs(c.call().args(), scope);
                Map<String, Object> kw = new LinkedHashMap<>(a.keywords);
                kw.put("caller", caller);
                append(out, PyRepr.str(call(fn, new Args(a.positional, kw))));
            }
            case Node.FilterBlock f -> {
                StringBuilder buf = new StringBuilder();
                exec(f.body(), scope, buf);
                append(out, PyRepr.str(applyFilterChain(f.filter(), buf.toString(), scope)));
            }
            case Node.With w -> {
                List<Object> values = new ArrayList<>();
                for (Expr e : w.values()) values.add(eval(e, scope));
                Scope inner = new Scope(scope);
                for (int i = 0; i < values.size(); i++) assign(w.targets().get(i), values.get(i), inner);
                return exec(w.body(), inner, out);
            }
            case Node.Block b -> exec(b.body(), new Scope(scope), out);
            case Node.Generation g -> {
                return exec(g.body(), scope, out);
            }
            case Node.Break b -> {
                return Signal.BREAK;
            }
            case Node.Continue c -> {
                return Signal.CONTINUE;
            }
        }
        return Signal.NORMAL;
    }

    private void assign(Expr target, Object value, Scope scope) {
        switch (target) {
            case Expr.Name n -> scope.vars.put(n.name(), value);
            case Expr.TupleLit t -> {
                if (value instanceof Undefined u) throw u.error();
                List<Object> items = PyTypes.iterate(value);
                if (items.size() != t.items().size()) {
                    throw new TemplateException(Kind.ValueError, items.size() > t.items().size()
                            ? "too many values to unpack (expected " + t.items().size() + ")"
                            : "not enough values to unpack (expected " + t.items().size() + ", got " + items.size() + ")");
                }
                for (int i = 0; i < items.size(); i++) assign(t.items().get(i), items.get(i), scope);
            }
            case Expr.NsRef r -> {
                Object ns = lookup(r.name(), scope);
                if (!(ns instanceof Namespace n)) {
                    throw new TemplateException(Kind.TemplateRuntimeError, "cannot assign attribute on non-namespace object");
                }
                n.attrs.put(r.attr(), value);
            }
            default -> throw new TemplateException(Kind.TemplateSyntaxError, "cannot assign to " + target);
        }
    }

    // ---- loops

    private void runLoop(Node.For f, Object iterable, Scope scope, StringBuilder out, int depth0) {
        List<Object> items = PyTypes.iterate(iterable);
        if (f.filter() != null) {
            List<Object> kept = new ArrayList<>();
            for (Object item : items) {
                step();
                Scope probe = new Scope(scope);
                assign(f.target(), item, probe);
                if (PyTypes.truthy(eval(f.filter(), probe))) kept.add(item);
            }
            items = kept;
        }
        if (items.isEmpty()) {
            exec(f.otherwise(), new Scope(scope), out);
            return;
        }
        LoopState loop = new LoopState(this, f, scope, items, depth0);
        for (int i = 0; i < items.size(); i++) {
            step();
            loop.index0 = i;
            Scope it = new Scope(scope);
            assign(f.target(), items.get(i), it);
            it.vars.put("loop", loop);
            Signal s = exec(f.body(), it, out);
            if (s == Signal.BREAK) break;
        }
    }

    /** The {@code loop} variable. */
    static final class LoopState {
        private final Interpreter interp;
        private final Node.For node;
        private final Scope scope;
        private final List<Object> items;
        private final int depth0;
        int index0;
        private Object lastChanged = PyTypes.MISSING;

        LoopState(Interpreter interp, Node.For node, Scope scope, List<Object> items, int depth0) {
            this.interp = interp;
            this.node = node;
            this.scope = scope;
            this.items = items;
            this.depth0 = depth0;
        }

        boolean recursive() {
            return node.recursive();
        }

        int index() {
            return index0 + 1;
        }

        int length() {
            return items.size();
        }

        Object attribute(String name) {
            int n = items.size();
            return switch (name) {
                case "index" -> (long) index0 + 1;
                case "index0" -> (long) index0;
                case "revindex" -> (long) (n - index0);
                case "revindex0" -> (long) (n - index0 - 1);
                case "first" -> index0 == 0;
                case "last" -> index0 == n - 1;
                case "length" -> (long) n;
                case "depth" -> (long) depth0 + 1;
                case "depth0" -> (long) depth0;
                case "previtem" -> index0 > 0 ? items.get(index0 - 1) : Undefined.hint("there is no previous item", "previtem");
                case "nextitem" -> index0 < n - 1 ? items.get(index0 + 1) : Undefined.hint("there is no next item", "nextitem");
                case "cycle", "changed" -> new BoundMethod(this, name);
                default -> Undefined.member(this, name);
            };
        }

        Object callMethod(String name, Args a) {
            if (name.equals("cycle")) {
                if (a.positional.isEmpty()) throw new TemplateException(Kind.TypeError, "no items for cycling given");
                return a.positional.get(index0 % a.positional.size());
            }
            PyTuple value = new PyTuple(a.positional);
            if (lastChanged == PyTypes.MISSING || !PyTypes.eq(lastChanged, value)) {
                lastChanged = value;
                return true;
            }
            return false;
        }

        /** {@code loop(children)} inside a recursive loop: renders the same body one level deeper. */
        Object recurse(Args a) {
            if (!node.recursive()) throw new TemplateException(Kind.TypeError, "'LoopContext' object is not callable");
            if (a.positional.size() != 1) throw new TemplateException(Kind.TypeError, "loop() takes exactly one argument");
            StringBuilder buf = new StringBuilder();
            interp.enter();
            try {
                interp.runLoop(node, a.positional.getFirst(), scope, buf, depth0 + 1);
            } finally {
                interp.callDepth--;
            }
            return buf.toString();
        }
    }

    private void enter() {
        if (++callDepth > MAX_CALL_DEPTH) {
            callDepth--;
            throw new TemplateException(Kind.LimitExceeded, "macro or recursive-loop calls nested deeper than " + MAX_CALL_DEPTH);
        }
    }

    // ---- macros

    /** A macro as a value: called like a function, returns its rendered body. */
    static final class MacroValue {
        private final Interpreter interp;
        private final Node.Macro node;
        private final Scope closure;

        MacroValue(Interpreter interp, Node.Macro node, Scope closure) {
            this.interp = interp;
            this.node = node;
            this.closure = closure;
        }

        String name() {
            return node.name();
        }

        /** jinja2's {@code Macro.__call__} binding rules, including caller/varargs/kwargs. */
        Object call(Args a) {
            List<Node.Param> params = node.params();
            Map<String, Object> kwargs = new LinkedHashMap<>(a.keywords);
            Scope s = new Scope(closure);
            int given = Math.min(a.positional.size(), params.size());
            boolean foundCaller = false;
            List<Object> bound = new ArrayList<>();
            for (int i = 0; i < given; i++) bound.add(a.positional.get(i));
            for (int i = given; i < params.size(); i++) {
                String name = params.get(i).name();
                bound.add(kwargs.containsKey(name) ? kwargs.remove(name) : PyTypes.MISSING);
                if (name.equals("caller")) foundCaller = true;
            }
            if (node.usesCaller() && !foundCaller) {
                Object caller = kwargs.remove("caller");
                s.vars.put("caller", caller != null ? caller : Undefined.hint("No caller defined", "caller"));
            }
            if (node.usesKwargs()) {
                s.vars.put("kwargs", new LinkedHashMap<Object, Object>(kwargs));
            } else if (!kwargs.isEmpty()) {
                if (kwargs.containsKey("caller")) {
                    throw new TemplateException(Kind.TypeError, "macro '" + name() + "' was invoked with two values for the special caller argument. This is most likely a bug.");
                }
                throw new TemplateException(Kind.TypeError, "macro '" + name() + "' takes no keyword argument '" + kwargs.keySet().iterator().next() + "'");
            }
            if (node.usesVarargs()) {
                s.vars.put("varargs", new PyTuple(a.positional.size() > params.size() ? a.positional.subList(params.size(), a.positional.size()) : List.of()));
            } else if (a.positional.size() > params.size()) {
                throw new TemplateException(Kind.TypeError, "macro '" + name() + "' takes not more than " + params.size() + " argument(s)");
            }
            interp.enter();
            try {
                for (int i = 0; i < params.size(); i++) {
                    Node.Param p = params.get(i);
                    Object v = bound.get(i);
                    if (v == PyTypes.MISSING) {
                        v = p.defaultValue() != null ? interp.eval(p.defaultValue(), s)
                                : Undefined.hint("parameter '" + p.name() + "' was not provided", p.name());
                    }
                    s.vars.put(p.name(), v);
                }
                StringBuilder buf = new StringBuilder();
                interp.exec(node.body(), s, buf);
                return buf.toString();
            } finally {
                interp.callDepth--;
            }
        }
    }

    // ---- expressions

    Object eval(Expr e, Scope scope) {
        try {
            return evalInner(e, scope);
        } catch (TemplateException ex) {
            throw ex.atLine(e.line());
        }
    }

    private Object evalInner(Expr e, Scope scope) {
        switch (e) {
            case Expr.Const c -> {
                return c.value();
            }
            case Expr.Name n -> {
                return lookup(n.name(), scope);
            }
            case Expr.ListLit l -> {
                List<Object> out = new ArrayList<>(l.items().size());
                for (Expr x : l.items()) out.add(eval(x, scope));
                return out;
            }
            case Expr.TupleLit t -> {
                List<Object> out = new ArrayList<>(t.items().size());
                for (Expr x : t.items()) out.add(eval(x, scope));
                return new PyTuple(out);
            }
            case Expr.DictLit d -> {
                Map<Object, Object> out = new LinkedHashMap<>();
                for (int i = 0; i < d.keys().size(); i++) {
                    Object k = eval(d.keys().get(i), scope);
                    PyTypes.dictPut(out, k, eval(d.values().get(i), scope));
                }
                return out;
            }
            case Expr.GetAttr g -> {
                return Access.getattr(eval(g.obj(), scope), g.name());
            }
            case Expr.GetItem g -> {
                Object obj = eval(g.obj(), scope);
                return Access.getitem(obj, eval(g.key(), scope));
            }
            case Expr.SliceLit s -> {
                return new PySlice(s.start() == null ? null : eval(s.start(), scope),
                        s.stop() == null ? null : eval(s.stop(), scope),
                        s.step() == null ? null : eval(s.step(), scope));
            }
            case Expr.Call c -> {
                Object fn = eval(c.fn(), scope);
                return call(fn, evalArgs(c.args(), scope));
            }
            case Expr.Filter f -> {
                return Filters.apply(f.name(), eval(f.value(), scope), evalArgs(f.args(), scope));
            }
            case Expr.Test t -> {
                return Tests.apply(t.name(), eval(t.value(), scope), evalArgs(t.args(), scope));
            }
            case Expr.Unary u -> {
                return PyOps.unary(u.op(), eval(u.operand(), scope));
            }
            case Expr.Binary b -> {
                Object left = eval(b.left(), scope);
                return PyOps.binary(b.op(), left, eval(b.right(), scope));
            }
            case Expr.And a -> {
                Object left = eval(a.left(), scope);
                return PyTypes.truthy(left) ? eval(a.right(), scope) : left;
            }
            case Expr.Or o -> {
                Object left = eval(o.left(), scope);
                return PyTypes.truthy(left) ? left : eval(o.right(), scope);
            }
            case Expr.Not n -> {
                return !PyTypes.truthy(eval(n.operand(), scope));
            }
            case Expr.Compare c -> {
                Object left = eval(c.first(), scope);
                for (int i = 0; i < c.ops().size(); i++) {
                    Object right = eval(c.rest().get(i), scope);
                    if (!PyOps.compare(c.ops().get(i), left, right)) return false;
                    left = right;
                }
                return true;
            }
            case Expr.Concat c -> {
                StringBuilder b = new StringBuilder();
                for (Expr p : c.parts()) append(b, PyRepr.str(eval(p, scope)));
                return b.toString();
            }
            case Expr.CondExpr c -> {
                if (PyTypes.truthy(eval(c.test(), scope))) return eval(c.then(), scope);
                if (c.otherwise() != null) return eval(c.otherwise(), scope);
                return Undefined.hint("the inline if-expression on line " + c.line() + " evaluated to false and no else section was defined.", null);
            }
            case Expr.NsRef r -> throw new TemplateException(Kind.TemplateSyntaxError, "namespace reference outside of set");
        }
    }

    private Object applyFilterChain(Expr chain, Object base, Scope scope) {
        if (!(chain instanceof Expr.Filter f)) throw new IllegalStateException("not a filter chain: " + chain);
        Object inner = f.value() == null ? base : applyFilterChain(f.value(), base, scope);
        return Filters.apply(f.name(), inner, evalArgs(f.args(), scope));
    }

    private Args evalArgs(Expr.Args a, Scope scope) {
        if (a.positional().isEmpty() && a.keywords().isEmpty() && a.starArgs() == null && a.starKwargs() == null) return Args.EMPTY;
        List<Object> pos = new ArrayList<>(a.positional().size());
        for (Expr e : a.positional()) pos.add(eval(e, scope));
        Map<String, Object> kw = new LinkedHashMap<>();
        for (Expr.Keyword k : a.keywords()) kw.put(k.name(), eval(k.value(), scope));
        if (a.starArgs() != null) pos.addAll(PyTypes.iterate(eval(a.starArgs(), scope)));
        if (a.starKwargs() != null) {
            Object m = eval(a.starKwargs(), scope);
            if (!(m instanceof Map<?, ?> map)) throw new TemplateException(Kind.TypeError, "argument after ** must be a mapping, not " + PyTypes.typeName(m));
            for (Map.Entry<?, ?> en : map.entrySet()) {
                if (!(en.getKey() instanceof String key)) throw new TemplateException(Kind.TypeError, "keywords must be strings");
                kw.put(key, en.getValue());
            }
        }
        return new Args(pos, kw);
    }

    Object call(Object fn, Args a) {
        return switch (fn) {
            case Undefined u -> throw u.error();
            case BoundMethod m when m.self() instanceof LoopState l -> l.callMethod(m.name(), a);
            case BoundMethod m -> Methods.call(m, a);
            case MacroValue m -> m.call(a);
            case PyCallable c -> c.call(a);
            case LoopState l -> l.recurse(a);
            case null, default -> throw new TemplateException(Kind.TypeError, "'" + PyTypes.typeName(fn) + "' object is not callable");
        };
    }
}
