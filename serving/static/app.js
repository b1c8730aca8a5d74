// The search page: queries the JSON API of crossmodal serve and shows the results as a grid.
// A search is also run from the URL (?q=..., ?item=..., &against=image|text&k=...), so results can be linked
// and a headless browser can load a results page directly.
"use strict";

const results = document.getElementById("results");
const statusLine = document.getElementById("status");
const queryBox = document.getElementById("query");
const againstBox = document.getElementById("against");

function say(message, isError) {
  statusLine.textContent = message;
  statusLine.className = isError ? "error" : "";
}

function thumbnailUrl(id) {
  return "/api/items/thumbnail?id=" + encodeURIComponent(id);
}

function render(payload, label) {
  results.replaceChildren();
  for (const hit of payload.results) {
    const card = document.createElement("article");
    card.className = "result";
    card.title = "search with this item";
    card.dataset.itemId = hit.item_id;
    if (hit.has_image) {
      const img = document.createElement("img");
      img.className = "thumb";
      img.src = thumbnailUrl(hit.item_id);
      img.alt = hit.text || hit.item_id;
      card.append(img);
    }
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.innerHTML = "<span></span><span></span>";
    meta.children[0].textContent = "#" + hit.rank + " " + hit.item_id;
    meta.children[1].textContent = hit.score.toFixed(3);
    card.append(meta);
    if (hit.text) {
      const text = document.createElement("p");
      text.className = "text";
      text.textContent = hit.text;
      card.append(text);
    }
    card.addEventListener("click", () => searchItem(hit.item_id));
    results.append(card);
  }
  say(payload.results.length + " results " + label);
}

async function run(url, options, label) {
  say("searching…");
  try {
    const response = await fetch(url, options);
    const payload = await response.json();
    if (!response.ok) {
      results.replaceChildren();
      say(payload.error || response.statusText, true);
      return;
    }
    render(payload, label);
  } catch (error) {
    say("the server did not answer: " + error, true);
  }
}

function params(extra) {
  const p = new URLSearchParams(extra);
  p.set("against", againstBox.value);
  return p;
}

// longer queries (a whole article) go in a POST body: a URL of hundreds of kilobytes is refused by servers
const LONGEST_QUERY_IN_URL = 2000;

function searchText(text) {
  const label = "for “" + text.slice(0, 60) + "”";
  if (text.length > LONGEST_QUERY_IN_URL) {
    history.replaceState(null, "", "/?" + params({}));
    const body = JSON.stringify({ q: text, against: againstBox.value });
    run("/api/search/text", { method: "POST", headers: { "Content-Type": "application/json" }, body: body }, label);
    return;
  }
  const p = params({ q: text });
  history.replaceState(null, "", "/?" + p);
  run("/api/search/text?" + p, {}, label);
}

function searchItem(id) {
  const p = params({ id: id });
  history.replaceState(null, "", "/?item=" + encodeURIComponent(id) + "&against=" + againstBox.value);
  run("/api/search/item?" + p, {}, "like item " + id);
  window.scrollTo(0, 0);
}

document.getElementById("text-form").addEventListener("submit", (event) => {
  event.preventDefault();
  searchText(queryBox.value);
});

document.getElementById("upload").addEventListener("change", (event) => {
  const file = event.target.files[0];
  if (!file) return;
  const body = new FormData();
  body.append("file", file);
  run("/api/search/image?" + params({}), { method: "POST", body: body }, "for the photo " + file.name);
});

async function start() {
  try {
    const health = await (await fetch("/api/health")).json();
    document.getElementById("about").textContent =
      health.items + " items (" + health.images + " photos, " + health.texts + " texts), model " + health.model +
      ", " + health.width + "-d, search " + health.search.image + "/" + health.search.text;
  } catch (error) {
    say("the server did not answer: " + error, true);
  }
  const url = new URLSearchParams(location.search);
  if (url.get("against")) againstBox.value = url.get("against");
  if (url.get("q")) {
    queryBox.value = url.get("q");
    searchText(url.get("q"));
  } else if (url.get("item")) {
    searchItem(url.get("item"));
  }
}

start();
