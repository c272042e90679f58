// The reviewers' SQL editor: CodeMirror 6 over a plain <textarea data-sql-editor>, which stays the
// form field (the page works without JavaScript). Completion knows the catalog's tables and
// columns (data-schema); hovering a column shows its documentation (data-docs).
import { EditorView, basicSetup } from "codemirror";
import { sql, PostgreSQL, SQLite } from "@codemirror/lang-sql";
import { hoverTooltip } from "@codemirror/view";

function columnDocs(docs) {
  // "table.column" -> doc, also reachable by the bare column name (several tables may share it).
  const byName = new Map();
  for (const [key, text] of Object.entries(docs)) {
    const bare = key.split(".").pop().toLowerCase();
    if (!byName.has(bare)) byName.set(bare, []);
    byName.get(bare).push([key, text]);
  }
  return byName;
}

function docHover(docs) {
  const byName = columnDocs(docs);
  return hoverTooltip((view, pos) => {
    const line = view.state.doc.lineAt(pos);
    let start = pos, end = pos;
    while (start > line.from && /\w/.test(line.text[start - line.from - 1])) start--;
    while (end < line.to && /\w/.test(line.text[end - line.from])) end++;
    if (start === end) return null;
    const word = line.text.slice(start - line.from, end - line.from).toLowerCase();
    const found = byName.get(word);
    if (!found) return null;
    return {
      pos: start, end, above: true,
      create() {
        const dom = document.createElement("div");
        dom.className = "cm-column-doc";
        for (const [key, text] of found.slice(0, 4)) {
          const p = document.createElement("p");
          const b = document.createElement("strong");
          b.textContent = key;
          p.append(b, " — " + text);
          dom.append(p);
        }
        return { dom };
      },
    };
  });
}

function mount(textarea) {
  const schema = JSON.parse(textarea.dataset.schema || "{}");
  const docs = JSON.parse(textarea.dataset.docs || "{}");
  const dialect = textarea.dataset.dialect === "sqlite" ? SQLite : PostgreSQL;
  const view = new EditorView({
    doc: textarea.value,
    extensions: [
      basicSetup,
      sql({ dialect, schema, upperCaseKeywords: true }),
      docHover(docs),
      EditorView.lineWrapping,
      EditorView.updateListener.of((u) => { if (u.docChanged) textarea.value = u.state.doc.toString(); }),
    ],
  });
  textarea.hidden = true;
  textarea.insertAdjacentElement("afterend", view.dom);
  view.dom.classList.add("sql-editor");
  view.dom.setAttribute("aria-label", textarea.getAttribute("aria-label") || "SQL");
  textarea.editorView = view;
  // Replace the whole text (a draft picked from the nearest examples).
  textarea.setSql = (text) => view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
  return view;
}

function mountAll() {
  for (const textarea of document.querySelectorAll("textarea[data-sql-editor]")) {
    if (!textarea.editorView) mount(textarea);
  }
}

window.askdbSqlEditor = { mount, mountAll };
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
else mountAll();
