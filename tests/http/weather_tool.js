// The function tool the tool tests offer (OpenAI's and Ollama's shape): a city and a unit, each an
// enum, so any call the grammar allows is a valid one.
'use strict';
module.exports.weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Rome'] }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city', 'unit'],
    },
  },
};
