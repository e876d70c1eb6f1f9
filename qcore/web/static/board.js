// qcore dashboard: live refresh of the parts of a page marked data-live, chart series
// toggles and the chart's fold (both remembered in localStorage), tabs, and confirmations.
// Loaded from the package (no CDN); no inline scripts.
"use strict";

function refreshLive() {
  if (document.hidden) return;
  const parts = document.querySelectorAll("[data-live]");
  if (!parts.length) return;
  fetch(location.href, { headers: { "X-Requested-With": "refresh" }, credentials: "same-origin" })
    .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
    .then((html) => {
      const fresh = new DOMParser().parseFromString(html, "text/html");
      for (const part of parts) {
        const next = fresh.querySelector(`[data-live="${part.dataset.live}"]`);
        if (next) part.replaceWith(document.importNode(next, true));
      }
      bindConfirms(document);
    })
    .catch(() => {});
}

// what a legend click shows or hides is remembered in this browser, by series name
const SERIES_KEY = "qcore.chart.series";
const FOLD_KEY = "qcore.chart.open";

function remembered(key) {
  try {
    return JSON.parse(localStorage.getItem(key) || "null");
  } catch (e) {
    return null;
  }
}

function remember(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
  } catch (e) {
    // storage refused (private mode, quota): the choice lasts for this page only
  }
}

function showSeries(svg, name, off) {
  for (const el of svg.querySelectorAll("[data-series]")) {
    if (el.getAttribute("data-series") === name) el.classList.toggle("off", off);
  }
}

function toggleSeries(event) {
  const item = event.target.closest("svg.line-chart .legend-item[data-series]");
  if (!item) return;
  const name = item.getAttribute("data-series");
  const off = !item.classList.contains("off");
  for (const svg of document.querySelectorAll("svg.line-chart")) showSeries(svg, name, off);
  const choices = remembered(SERIES_KEY) || {};
  choices[name] = !off;
  remember(SERIES_KEY, choices);
}

function restoreSeries() {
  const choices = remembered(SERIES_KEY);
  if (!choices || typeof choices !== "object") return;
  for (const item of document.querySelectorAll("svg.line-chart .legend-item[data-series]")) {
    const name = item.getAttribute("data-series");
    if (typeof choices[name] === "boolean") showSeries(item.closest("svg"), name, !choices[name]);
  }
}

function bindFold() {
  const open = remembered(FOLD_KEY);
  for (const fold of document.querySelectorAll("details.chart-fold")) {
    if (typeof open === "boolean") fold.open = open;
    fold.addEventListener("toggle", () => remember(FOLD_KEY, fold.open));
  }
}

function bindTabs() {
  for (const tab of document.querySelectorAll("nav.tabs [data-tab]")) {
    tab.addEventListener("click", (event) => {
      event.preventDefault();
      for (const other of document.querySelectorAll("nav.tabs [data-tab]")) {
        other.classList.toggle("here", other === tab);
      }
      for (const other of document.querySelectorAll("nav.tabs [data-tab]")) {
        other.setAttribute("aria-selected", other === tab ? "true" : "false");
      }
      for (const panel of document.querySelectorAll("[data-panel]")) {
        panel.hidden = panel.dataset.panel !== tab.dataset.tab;
      }
      // the range links keep the tab now shown
      for (const link of document.querySelectorAll("nav.ranges a[data-range]")) {
        const url = new URL(link.href);
        url.searchParams.set("chart", tab.dataset.tab);
        link.href = url.toString();
      }
      history.replaceState(null, "", tab.href);
    });
  }
}

function bindConfirms(root) {
  for (const el of root.querySelectorAll("[data-confirm]")) {
    if (el.dataset.bound) continue;
    el.dataset.bound = "1";
    const form = el.tagName === "FORM" ? el : el.form;
    const ask = (event) => {
      if (!window.confirm(el.dataset.confirm)) event.preventDefault();
    };
    if (el.tagName === "FORM") form.addEventListener("submit", ask);
    else el.addEventListener("click", ask);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.addEventListener("click", toggleSeries);
  restoreSeries();
  bindFold();
  bindTabs();
  bindConfirms(document);
  const seconds = Number(document.body.dataset.refresh || 0);
  if (seconds > 0) setInterval(refreshLive, seconds * 1000);
});
