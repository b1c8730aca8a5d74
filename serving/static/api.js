// Lists the server's endpoints from its OpenAPI description (crossmodal serve --api-docs).
"use strict";

async function listEndpoints() {
  const main = document.getElementById("endpoints");
  const spec = await (await fetch("/openapi.json")).json();
  for (const [path, methods] of Object.entries(spec.paths)) {
    for (const [method, operation] of Object.entries(methods)) {
      const section = document.createElement("section");
      const title = document.createElement("h2");
      title.textContent = method.toUpperCase() + " " + path;
      section.append(title);
      const about = document.createElement("p");
      about.textContent = operation.description || operation.summary || "";
      section.append(about);
      const list = document.createElement("ul");
      for (const parameter of operation.parameters || []) {
        const item = document.createElement("li");
        const schema = parameter.schema || {};
        item.textContent = parameter.name + " (" + parameter.in + (parameter.required ? ", required" : "") +
          (schema.default !== undefined ? ", default " + schema.default : "") + ")" +
          (parameter.description ? ": " + parameter.description : "");
        list.append(item);
      }
      section.append(list);
      main.append(section);
    }
  }
}

listEndpoints();
