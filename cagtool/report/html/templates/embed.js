// Draws every chart spec into its placeholder. The specs are JSON data, parsed, never evaluated.
// `data-charts` and `data-charts-done` on <body> count the charts and those drawn (the browser tests wait for them).
(function () {
  var blocks = document.querySelectorAll('script[type="application/json"][data-chart]');
  var done = 0;
  blocks.forEach(function (block) {
    var target = document.getElementById(block.getAttribute('data-chart'));
    var spec = JSON.parse(block.textContent);
    vegaEmbed(target, spec, {renderer: 'svg', actions: false}).then(function () {
      target.setAttribute('data-rendered', 'true');
    }).catch(function (error) {
      console.error('chart ' + target.id + ': ' + error);
    }).finally(function () {
      done += 1;
      document.body.setAttribute('data-charts-done', String(done));
    });
  });
  document.body.setAttribute('data-charts', String(blocks.length));
})();
