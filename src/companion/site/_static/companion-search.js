/* Search result snippets without raw TeX: formulas are replaced by an ellipsis before Sphinx's
   searchtools extracts the text of a page (no network, no library). */
(function () {
  function patch() {
    if (typeof Search === "undefined" || !Search.htmlToText || Search._companionPatched) return;
    var original = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      var doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(".math, .MathJax, mjx-container, .companion-provenance, .cell_input")
        .forEach(function (el) { el.replaceWith(doc.createTextNode(el.tagName === "DIV" ? " " : "…")); });
      return original(doc.documentElement.outerHTML, anchor);
    };
    Search._companionPatched = true;
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", patch);
  else patch();
})();
