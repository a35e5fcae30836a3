// Prints every public method of the installed Modal JS SDK, one "Class.method" a line,
// sorted: the methods of each exported class (prototype and static, getters and
// setters included), leaving out error classes. ../../docs_test.go checks
// docs/modal.md's table against it.
import * as modal from "modal";

const names = new Set();
for (const [name, value] of Object.entries(modal)) {
  if (typeof value !== "function" || !value.prototype || value.prototype instanceof Error) continue;
  for (const [target, prefix] of [[value.prototype, `${name}.`], [value, `${name}.`]]) {
    for (const key of Object.getOwnPropertyNames(target)) {
      if (key === "constructor" || key === "prototype" || key === "length" || key === "name" || key.startsWith("_")) continue;
      const d = Object.getOwnPropertyDescriptor(target, key);
      if (typeof d.value === "function" || d.get || d.set) names.add(prefix + key);
    }
  }
}
console.log([...names].sort().join("\n"));
